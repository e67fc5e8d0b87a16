//! A stall: no step for the timeout names the ranks not at the all-reduce; a pause is none.

use super::*;

#[test]
fn a_stall_names_the_ranks_that_did_not_reach_the_all_reduce_once() {
    let mut d = detector(3);
    let secs = Duration::from_secs;
    d.on_row(&row(7, &[1.0; 3], &[0.1; 3])); // completes at 7 ms
    let beats = Heartbeats::new(3);
    beats.beat(0, 8, Phase::Reduce);
    beats.beat(1, 8, Phase::Compute);
    beats.beat(2, 8, Phase::Update);
    assert_eq!(d.tick(secs(59), &beats.read()), None);
    let w = d.tick(secs(61), &beats.read()).unwrap();
    assert_eq!(
        w,
        Warning::Stall {
            step: 7,
            waited: secs(61) - ms(7.0),
            missing: vec![1],
            injected: None,
            suspended: None,
        }
    );
    assert!(
        w.to_string()
            .contains("for 61 s after step 7; rank(s) 1 did not reach the all-reduce"),
        "{w}"
    );
    // a short --stall-timeout keeps its tenths
    let short = Warning::Stall {
        step: 7,
        waited: ms(500.0),
        missing: vec![1],
        injected: Some("--slow-data 1:2500".into()),
        suspended: None,
    };
    assert!(
        short
            .to_string()
            .ends_with("did not reach the all-reduce (fault injected: --slow-data 1:2500)"),
        "{short}"
    );
    assert!(short.to_string().contains("for 0.5 s after"), "{short}");
    assert_eq!(
        d.tick(secs(90), &beats.read()),
        None,
        "one warning per stall"
    );
    // progress resets it
    let mut r = row(8, &[1.0; 3], &[0.1; 3]);
    r.at = secs(100);
    d.on_row(&r);
    assert_eq!(d.tick(secs(159), &beats.read()), None);
    assert!(d.tick(secs(161), &beats.read()).is_some());
    // a validation is not a stall, however long; the clock starts again when it ends
    let mut r = row(9, &[1.0; 3], &[0.1; 3]);
    r.at = secs(200);
    d.on_row(&r);
    for rank in 0..3 {
        beats.beat(rank, 9, Phase::Validate);
    }
    assert_eq!(d.tick(secs(300), &beats.read()), None);
    assert_eq!(d.tick(secs(500), &beats.read()), None);
    beats.beat(0, 10, Phase::Data);
    assert_eq!(d.tick(secs(559), &beats.read()), None);
    assert!(d.tick(secs(561), &beats.read()).is_some());
    // nor is rank 0 writing a checkpoint (the others wait at the next all-reduce)
    let mut r = row(10, &[1.0; 3], &[0.1; 3]);
    r.at = secs(600);
    d.on_row(&r);
    beats.beat(0, 10, Phase::Checkpoint);
    for rank in 1..3 {
        beats.beat(rank, 11, Phase::Reduce);
    }
    assert_eq!(d.tick(secs(900), &beats.read()), None);
    beats.beat(0, 11, Phase::Data);
    assert_eq!(d.tick(secs(959), &beats.read()), None);
    assert!(d.tick(secs(961), &beats.read()).is_some());
}

#[test]
fn a_pause_is_not_a_stall() {
    let mut d = detector(2);
    let secs = Duration::from_secs;
    d.set_paused(true, secs(1));
    assert_eq!(d.tick(secs(600), &Heartbeats::new(2).read()), None);
    d.set_paused(false, secs(600));
    assert_eq!(d.tick(secs(650), &Heartbeats::new(2).read()), None);
    assert!(d.tick(secs(661), &Heartbeats::new(2).read()).is_some());
}

#[test]
fn a_stall_of_a_process_suspended_on_this_machine_says_so() {
    // the run's other process on this machine, holding rank 1: stopped as Ctrl-Z stops one
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let pid = child.id();
    // SAFETY: kill only signals the child this test started
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGSTOP) };
    let stopped = (0..200).any(|_| {
        std::thread::sleep(ms(5.0));
        crate::pids::stopped(pid)
    });
    let ctx = Context {
        cores: 64,
        peers_here: vec![crate::pids::Peer { ranks: 1..2, pid }],
        ..Context::default()
    };
    let mut d = Detector::new(2, DetectorConfig::default(), ctx);
    d.on_row(&row(7, &[1.0; 2], &[0.1; 2]));
    let beats = Heartbeats::new(2);
    beats.beat(0, 8, Phase::Reduce);
    beats.beat(1, 8, Phase::Compute);
    let w = d.tick(Duration::from_secs(61), &beats.read());
    let _ = child.kill();
    let _ = child.wait();
    assert!(stopped, "the child was not seen stopped");
    let w = w.unwrap().to_string();
    assert!(
        w.ends_with(&format!(
            "rank(s) 1 did not reach the all-reduce; the process of rank(s) 1 (pid {pid}) is suspended on this machine (Ctrl-Z, kill -STOP); `kill -CONT {pid}` resumes it"
        )),
        "{w}"
    );
}
