//! The scale report as a printed table, and as CSV or JSON for `--out`.

use std::path::Path;

use super::Row;
use crate::engine::output::Output;

fn pct(v: f64) -> String {
    format!("{:.0}%", v * 100.0)
}

/// The table as printed.
pub fn table(rows: &[Row]) -> Vec<String> {
    let w = rows
        .iter()
        .map(|r| r.strategy.len())
        .max()
        .unwrap_or(0)
        .max(8);
    let mut out = vec![format!(
        "{:<w$} {:>7} {:>6} {:>7} {:>8} {:>11} {:>7} {:>8} {:>6} {:>6} {:>7} {:>6} {:>6} {:>6} {:>6} {:>8} {:>8} {:>7}",
        "strategy",
        "devices",
        "batch",
        "global",
        "prefetch",
        "samples/s",
        "spread",
        "speedup",
        "eff",
        "util",
        "memacc",
        "mfu",
        "data",
        "comm",
        "wait",
        "transfer",
        "loss",
        "val acc"
    )];
    for r in rows {
        out.push(format!(
            "{:<w$} {:>7} {:>6} {:>7} {:>8} {:>11.0} {:>7} {:>8} {:>6} {:>6} {:>7} {:>6} {:>6} {:>6} {:>6} {:>8} {:>8.4} {:>7}",
            r.strategy,
            r.devices,
            r.per_replica,
            r.global_batch,
            if r.prefetch { "on" } else { "off" },
            r.samples_per_sec,
            super::spread_text(r.spread),
            r.speedup.map_or("-".into(), |s| format!("{s:.2}x")),
            r.efficiency.map_or("-".into(), pct),
            pct(r.utilization),
            r.memory_access.map_or("n/a".into(), pct),
            crate::front::words::mfu_text(r.mfu),
            pct(r.data_wait_share),
            pct(r.comm_share),
            pct(r.sync_wait_share),
            pct(r.transfer_share),
            r.final_loss,
            r.val_accuracy
                .map_or("-".into(), |a| format!("{:.1}%", a * 100.0))
        ));
    }
    out
}

/// Checks that `--out` names a .csv or .json file that can be written, writing nothing; the
/// file to write (a link's target).
pub fn check_out(path: &Path) -> Result<std::path::PathBuf, String> {
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    if ext != "csv" && ext != "json" {
        return Err(format!(
            "--out {}: use a .csv or .json file name",
            path.display()
        ));
    }
    let report = Output {
        flag: "--out",
        kind: "a scale report",
        example: "scale.csv",
        // (the JSON's rows, or the CSV's header)
        ours: |p| {
            let head = crate::engine::output::head(p, 64);
            let csv = &CSV_HEADER.as_bytes()[..head.len().min(CSV_HEADER.len())];
            let json: String = (String::from_utf8_lossy(&head).chars())
                .filter(|c| !c.is_whitespace())
                .collect();
            json == "[]" || json.starts_with("[{\"strategy\":") || (!head.is_empty() && head == csv)
        },
    };
    report.target(path)
}

/// A CSV field: quoted where it holds a comma, a quote or a line break (`local-sgd:8,moments`).
fn field(s: &str) -> String {
    match s.contains([',', '"', '\n', '\r']) {
        true => format!("\"{}\"", s.replace('"', "\"\"")),
        false => s.to_string(),
    }
}

/// The CSV's first line.
const CSV_HEADER: &str = "strategy,devices,per_replica,global_batch,prefetch,samples_per_sec,spread,speedup,efficiency,utilization,memory_access,mfu,data_wait_share,comm_share,sync_wait_share,transfer_share,final_loss,val_accuracy,faults,outside_cores\n";

/// The cores other work took (`Row::outside`), as the JSON report writes them.
pub(super) fn cores_taken<S: serde::Serializer>(
    load: &Option<crate::observe::machine_load::Load>,
    s: S,
) -> Result<S::Ok, S::Error> {
    serde::Serialize::serialize(&load.as_ref().map(|l| l.others), s)
}

/// Writes the rows as CSV or JSON, chosen by the file's extension.
pub fn write(path: &Path, rows: &[Row]) -> Result<(), String> {
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    // (a link to a file: that file is written, the link kept)
    let target = check_out(path)?;
    let text = match ext {
        "json" => serde_json::to_string_pretty(rows).map_err(|e| e.to_string())?,
        "csv" => {
            let mut s = String::from(CSV_HEADER);
            let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.4}"));
            for r in rows {
                s += &format!(
                    "{},{},{},{},{},{:.1},{},{},{},{:.4},{},{},{:.4},{:.4},{:.4},{:.4},{},{},{},{}\n",
                    field(&r.strategy),
                    r.devices,
                    r.per_replica,
                    r.global_batch,
                    r.prefetch,
                    r.samples_per_sec,
                    opt(r.spread),
                    opt(r.speedup),
                    opt(r.efficiency),
                    r.utilization,
                    opt(r.memory_access),
                    opt(r.mfu),
                    r.data_wait_share,
                    r.comm_share,
                    r.sync_wait_share,
                    r.transfer_share,
                    r.final_loss,
                    r.val_accuracy.map_or(String::new(), |a| format!("{a:.4}")),
                    field(&r.faults),
                    opt(r.outside.as_ref().map(|l| l.others)),
                );
            }
            s
        }
        _ => {
            return Err(format!(
                "--out {}: use a .csv or .json file name",
                path.display()
            ))
        }
    };
    // a full disk or a crash leaves an earlier results file whole, never a truncated one
    crate::files::write::replace_file(&target, text.as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_must_name_a_file_and_writing_replaces_it_whole() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir(d.join("d.csv")).unwrap();
        let e = check_out(&d.join("d.csv")).unwrap_err();
        assert!(e.contains("is a directory"), "{e}");
        assert!(check_out(&d.join("t.txt"))
            .unwrap_err()
            .contains(".csv or .json"));
        let out = d.join("r.csv");
        // another file is kept; an earlier, longer report is replaced
        std::fs::write(&out, "my notes\n").unwrap();
        let e = check_out(&out).unwrap_err();
        assert!(e.contains("exists and is not a scale report"), "{e}");
        let earlier = format!("{CSV_HEADER}{}", "mirrored,1,32\n".repeat(100));
        std::fs::write(&out, earlier).unwrap();
        check_out(&out).unwrap();
        write(&out, &[]).unwrap();
        let text = std::fs::read_to_string(&out).unwrap();
        assert!(
            text.starts_with("strategy,devices,") && text.lines().count() == 1,
            "{text}"
        );
        let names: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 2, "no temporary file left: {names:?}");
        // a strategy or fault with a comma is one quoted field
        let row = Row {
            strategy: "local-sgd:4,moments".into(),
            devices: 2,
            per_replica: 32,
            global_batch: 64,
            prefetch: true,
            samples_per_sec: 100.0,
            spread: None,
            speedup: None,
            efficiency: None,
            utilization: 0.5,
            memory_access: None,
            mfu: None,
            data_wait_share: 0.0,
            comm_share: 0.0,
            sync_wait_share: 0.0,
            transfer_share: 0.0,
            final_loss: 1.0,
            val_accuracy: None,
            faults: "--slow-rank 1:2,--slow-data 0:3".into(),
            outside: Some(crate::observe::machine_load::Load {
                cores: 2,
                ours: 1.0,
                others: 0.9,
                top: None,
            }),
        };
        // (through a link to it: the file it names is written, the link kept)
        std::os::unix::fs::symlink(&out, d.join("link.csv")).unwrap();
        write(&d.join("link.csv"), &[row]).unwrap();
        assert!(d.join("link.csv").symlink_metadata().unwrap().is_symlink());
        let text = std::fs::read_to_string(&out).unwrap();
        let line = text.lines().nth(1).unwrap();
        assert!(
            line.starts_with("\"local-sgd:4,moments\",2,32,64,")
                && line.ends_with(",\"--slow-rank 1:2,--slow-data 0:3\",0.9000"),
            "{line}"
        );
        // a JSON file of other contents is not taken for an earlier report
        let json = d.join("r.json");
        std::fs::write(&json, "[1, 2, 3]").unwrap();
        assert!(check_out(&json).is_err());
        std::fs::write(&json, "[\n  {\n    \"strategy\": \"mirrored\",").unwrap();
        check_out(&json).unwrap();
    }
}
