//! Other work taking a machine's cores: each machine said on its own, and a straggler there
//! explained by it.

use super::*;

#[test]
fn each_machines_outside_load_is_said_and_cleared_on_its_own() {
    let mut d = on_two_hosts();
    let load = |others| crate::observe::machine_load::Load {
        cores: 2,
        ours: 1.5,
        others,
        top: None,
    };
    // before the first step: nothing is said
    assert!(d.on_load(Some(2), &load(1.0)).is_none());
    d.on_row(&row(1, &[10.0; 4], &[0.0; 4]));
    let mut said = Vec::new();
    for others in [1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0] {
        // machine b (process 1, ranks 2 and 3) loaded, then free; process 0's free throughout
        said.extend(d.on_load(Some(2), &load(others)));
        said.extend(d.on_load(None, &load(0.0)));
    }
    let kinds: Vec<(&str, Option<usize>)> = said.iter().map(|w| (w.kind(), w.rank())).collect();
    assert_eq!(
        kinds,
        [("outside_load", Some(2)), ("outside_load_cleared", Some(2))]
    );
    assert!(
        said[0].to_string().starts_with("outside load on b: "),
        "{}",
        said[0]
    );
    // said again, then b's loads stop coming: taken back as no longer known, once; a machine
    // never said of, or unknown, gives nothing
    for _ in 0..3 {
        d.on_load(Some(2), &load(1.0));
    }
    assert!(d.on_unheard(0).is_none() && d.on_unheard(7).is_none());
    let taken_back = d.on_unheard(2).expect("said of b");
    assert!(matches!(
        taken_back,
        Warning::OutsideLoadCleared {
            rank: Some(2),
            unheard: true,
            ..
        }
    ));
    assert!(taken_back
        .to_string()
        .starts_with("outside load on b no longer known: "));
    assert!(d.on_unheard(2).is_none());
}

#[test]
fn a_straggler_on_a_machine_whose_cores_other_work_takes_is_said_so() {
    let mut d = on_two_hosts();
    let load = crate::observe::machine_load::Load {
        cores: 16,
        ours: 14.0,
        others: 3.0,
        top: Some(("cc1plus (pid 9)".into(), 2.5)),
    };
    d.on_row(&row(1, &[10.0; 4], &[0.0; 4]));
    for _ in 0..3 {
        d.on_load(Some(2), &load);
    }
    let mut warnings = Vec::new();
    for step in 2..=100 {
        warnings.extend(d.on_row(&row(step, &[10.0, 10.0, 20.0, 10.0], &[0.0; 4])));
    }
    let w = &warnings[0];
    assert!(
        matches!(w, Warning::Straggler { rank: 2, cause: Cause::OutsideLoad { host: Some(h), .. }, .. } if h == "b"),
        "{w:?}"
    );
    assert!(
        w.to_string().contains("likely cause: outside load (other work takes 3.0 of b's 16 cores, 2.5 of them cc1plus (pid 9); the fastest rank's machine is free)"),
        "{w}"
    );
}
