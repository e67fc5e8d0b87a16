//! A scrape's figures are one step's, whatever the steps recorded meanwhile.

use super::*;

/// A scrape while steps are recorded holds one step's figures together: the step, the count of
/// steps and that step's loss (set one by one) never come from two steps.
#[test]
fn a_scrape_holds_one_step_s_figures_together() {
    let reg = Registry::new();
    let mut p = Prometheus::new(&reg, &info(), &[]).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let scraping = {
        let (reg, stop) = (reg.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut torn = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let t = text(&reg);
                let (Some(step), Some(steps), Some(loss)) = (
                    value(&t, "mgtop_step"),
                    value(&t, "mgtop_steps_total"),
                    value(&t, "mgtop_train_loss"),
                ) else {
                    continue;
                };
                if step != steps || loss != step {
                    torn.push((step, steps, loss));
                }
            }
            torn
        })
    };
    for s in 1..=20_000 {
        let mut r = row(s);
        r.loss = s as f32;
        p.step(&r, Some(1000.0), false).unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let torn = scraping.join().unwrap();
    assert!(
        torn.is_empty(),
        "{} torn scrapes, e.g. {:?}",
        torn.len(),
        &torn[..torn.len().min(3)]
    );
}
