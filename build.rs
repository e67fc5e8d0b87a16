//! Tells the code whether it is built without optimisation (`cargo run` without `--release`):
//! its measurements (`bench`, `scale`) say so, as their figures would mislead.

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rustc-check-cfg=cfg(unoptimized)");
    if std::env::var("OPT_LEVEL").as_deref() == Ok("0") {
        println!("cargo::rustc-cfg=unoptimized");
    }
}
