//! Records read back as written.

use super::*;

#[test]
fn a_spike_warning_said_for_several_reads_back_as_such_and_an_older_one_as_one() {
    use crate::observe::straggler::Spike;
    let spike = Spike {
        step: 70,
        said_for: SaidFor {
            count: 12,
            first: 40,
            last: 90,
        },
        norm: 30.0,
        median: 1.0,
        steps: 100,
        clip: None,
        bound: 2.0,
    };
    let t = Duration::from_secs(3);
    let mut v = super::super::records::warning(&Warning::GradSpike(spike), t);
    let spikes = |v: &Value| match record(v, 1).unwrap() {
        Some(Record::Warning { spikes, step, .. }) => (spikes, step),
        r => panic!("{r:?}"),
    };
    let said_for = SaidFor {
        count: 12,
        first: 40,
        last: 90,
    };
    assert_eq!(spikes(&v), (Some(said_for), Some(70)));
    // (a file from before a warning was said for several)
    for k in ["spikes", "first_step", "last_step"] {
        v.as_object_mut().unwrap().remove(k);
    }
    assert_eq!(spikes(&v), (Some(SaidFor::one(70)), Some(70)));
}

#[test]
fn a_hand_edited_run_name_is_read_cut_to_what_name_takes() {
    let mut v = super::super::records::run(&crate::engine::RunInfo::example(1));
    v["name"] = "é".repeat(1_000_000).into();
    let info = run_line(v.to_string().as_bytes()).unwrap();
    assert_eq!(info.name.chars().count(), crate::config::MAX_NAME_CHARS + 1);
    assert!(info.name.ends_with("é…"));
}
