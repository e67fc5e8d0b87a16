use super::*;
use crossbeam_channel::unbounded;

#[test]
fn controller_rejects_bad_batches() {
    let (tx, _rx) = unbounded();
    let c = Controller::new(tx, DeviceCap::new(1, false));
    assert_eq!(c.set_batch_per_replica(0), Err(ControlError::BadBatch(0)));
    // before the GPU has told: too early; after: held to what it told
    assert_eq!(
        c.set_batch_per_replica(64),
        Err(ControlError::DevicesStarting)
    );
    c.devices.tell(100);
    assert!(c.set_batch_per_replica(64).is_ok());
    assert!(c.set_batch_per_replica(100).is_ok());
    assert_eq!(
        c.set_batch_per_replica(101),
        Err(ControlError::TooLargeForDevices {
            batch: 101,
            max: 100
        })
    );
    // a training split of 150 samples over 2 ranks: 75 per replica takes it all
    assert_eq!(data_batch_cap(150, 2, 1), 75);
    assert_eq!(data_batch_cap(151, 2, 1), 76);
    assert_eq!(data_batch_cap(150, 2, 4), 19);
    let c = c.within_data(150, 2, 1);
    assert!(c.set_batch_per_replica(75).is_ok());
    let e = c.set_batch_per_replica(76).unwrap_err();
    assert_eq!(
        e,
        ControlError::LargerThanData {
            batch: 76,
            max: 75,
            samples: 150
        }
    );
    assert!(e.to_string().contains("at most 75 per replica"), "{e}");
    // a model whose batch norm a batch of 1 makes of one value per channel
    assert!(c.set_batch_per_replica(1).is_ok());
    let c = c.not_one(Some("batch norm `bn.1` would ...".into()));
    let e = c.set_batch_per_replica(1).unwrap_err().to_string();
    assert_eq!(e, "batch norm `bn.1` would ...: use 2 or more");
    assert!(c.set_batch_per_replica(2).is_ok());
    // another process's memory takes no more than 40 per replica
    let c = c.elsewhere(Some(40));
    assert!(c.set_batch_per_replica(40).is_ok());
    let e = c.set_batch_per_replica(41).unwrap_err();
    assert_eq!(e, ControlError::TooLargeElsewhere { batch: 41, max: 40 });
    assert!(e.to_string().contains("memory of another process"), "{e}");
}

#[test]
fn another_process_s_gpus_hold_batch_changes_until_every_rank_told_its_own() {
    let (tx, _rx) = unbounded();
    // one GPU here, others in the run's other processes
    let c = Controller::new(tx, DeviceCap::new(1, true));
    c.devices.tell(100);
    assert_eq!(
        c.set_batch_per_replica(64),
        Err(ControlError::DevicesStarting)
    );
    // every rank told the others: the least of theirs is 80
    c.devices.tell_run(80);
    assert!(c.set_batch_per_replica(80).is_ok());
    assert_eq!(
        c.set_batch_per_replica(81),
        Err(ControlError::TooLargeForDevices { batch: 81, max: 80 })
    );
    // (told once: a second telling changes nothing, nor does one where no process has GPUs)
    c.devices.tell_run(10);
    assert!(c.set_batch_per_replica(70).is_ok());
    let (tx, _rx) = unbounded();
    let alone = Controller::new(tx, DeviceCap::new(0, false));
    alone.devices.tell_run(10);
    assert!(alone.set_batch_per_replica(64).is_ok());
}

#[test]
fn decision_round_trips_and_pause_blocks_until_resume() {
    let d = Decision {
        batch: Some(128),
        checkpoint: true,
        stop: Some(false),
        was_paused: true,
        hold: false,
    };
    assert_eq!(Decision::decode(d.encode()), d);
    let (tx, rx) = unbounded();
    let mut dec = Decider::new(rx);
    tx.send(Control::SetBatch(64).into()).unwrap();
    tx.send(Control::Pause.into()).unwrap();
    let t = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(30));
        tx.send(Control::Resume.into()).unwrap();
    });
    let mut log = Vec::new();
    let d = dec.decide(&mut |h| log.push(h));
    t.join().unwrap();
    assert_eq!(log, vec![Heard::Paused(true), Heard::Paused(false)]);
    assert_eq!(d.batch, Some(64));
    assert!(d.was_paused);
}

#[test]
fn the_decider_names_who_asked_where_the_sender_said() {
    let (tx, rx) = unbounded();
    let c = Controller::new(tx, DeviceCap::new(0, false));
    let mut dec = Decider::new(rx);
    c.checkpoint().unwrap();
    c.send_for(Control::Stop { checkpoint: false }, "client 7".into())
        .unwrap();
    let mut log = Vec::new();
    let d = dec.decide(&mut |h| log.push(h));
    assert_eq!((d.checkpoint, d.stop), (true, Some(false)));
    let stop = Control::Stop { checkpoint: false };
    assert_eq!(log, vec![Heard::Asked(stop, "client 7".into())]);
    // a bad batch is refused before it travels: nothing to name
    assert!(c.send_for(Control::SetBatch(0), "client 7".into()).is_err());
    dec.decide(&mut |h| log.push(h));
    assert_eq!(log.len(), 1);
}

#[test]
fn controls_asked_while_paused_survive_the_ranks_meeting_in_between() {
    let (tx, rx) = unbounded();
    let mut dec = Decider::new(rx);
    tx.send(Control::Checkpoint.into()).unwrap();
    tx.send(Control::Pause.into()).unwrap();
    tx.send(Control::SetBatch(16).into()).unwrap();
    let mut log = Vec::new();
    // the checkpoint is written while paused, the ranks meeting for it
    let held = dec.decide(&mut |h| log.push(h));
    assert_eq!(
        held,
        Decision {
            hold: true,
            checkpoint: true,
            ..Decision::default()
        }
    );
    // paused longer than one hold: the ranks meet, nothing else is applied yet
    let held = dec.decide(&mut |h| log.push(h));
    assert_eq!(
        held,
        Decision {
            hold: true,
            ..Decision::default()
        }
    );
    tx.send(Control::Checkpoint.into()).unwrap();
    assert!(dec.decide(&mut |h| log.push(h)).checkpoint);
    tx.send(Control::Resume.into()).unwrap();
    let d = dec.decide(&mut |h| log.push(h));
    assert_eq!(
        (d.batch, d.checkpoint, d.was_paused, d.hold),
        (Some(16), false, true, false)
    );
    assert_eq!(log, vec![Heard::Paused(true), Heard::Paused(false)]);
}

#[test]
fn a_request_that_would_change_nothing_is_refused_not_taken() {
    let (tx, rx) = unbounded();
    let c = Controller::new(tx, DeviceCap::new(0, false)).with_batch(16);
    // (another screen's controller: the same run)
    let other = c.clone();
    // the batch the run has, then the one last asked for
    assert_eq!(
        c.set_batch_per_replica(16),
        Err(ControlError::SameBatch(16))
    );
    assert!(c.set_batch_per_replica(32).is_ok());
    assert_eq!(
        other.set_batch_per_replica(32),
        Err(ControlError::SameBatch(32))
    );
    assert!(other.set_batch_per_replica(16).is_ok());
    assert_eq!(c.resume(), Err(ControlError::NotPaused));
    assert!(c.pause().is_ok());
    assert_eq!(other.pause(), Err(ControlError::Paused));
    assert!(other.resume().is_ok());
    assert_eq!(c.resume(), Err(ControlError::NotPaused));
    assert!(c.send(Control::Stop { checkpoint: false }).is_ok());
    // a stop asked again may ask for its checkpoint; nothing else is taken
    assert!(other.send(Control::Stop { checkpoint: true }).is_ok());
    for later in [Control::Checkpoint, Control::Pause, Control::SetBatch(8)] {
        assert_eq!(other.send(later), Err(ControlError::Stopping));
    }
    let taken: Vec<Control> = rx.try_iter().map(|a| a.control).collect();
    assert_eq!(
        taken,
        [
            Control::SetBatch(32),
            Control::SetBatch(16),
            Control::Pause,
            Control::Resume,
            Control::Stop { checkpoint: false },
            Control::Stop { checkpoint: true }
        ]
    );
}

#[test]
fn once_the_run_has_ended_every_ask_is_refused_as_its_end() {
    let (tx, rx) = unbounded();
    let c = Controller::new(tx, DeviceCap::new(0, false));
    let decider = Decider::new(rx).while_open(c.open());
    assert!(c.pause().is_ok());
    drop(decider);
    // (a pause of the paused run would otherwise be "paused already")
    for asked in [Control::Pause, Control::Resume, Control::Checkpoint] {
        assert_eq!(c.send(asked), Err(ControlError::Ended), "{asked:?}");
    }
    let e = c
        .clone()
        .send(Control::Stop { checkpoint: true })
        .unwrap_err();
    assert_eq!(e.to_string(), "the run has already ended");
}

#[test]
fn once_the_last_step_is_trained_every_ask_is_refused_as_the_run_finishing() {
    let (tx, rx) = unbounded();
    let c = Controller::new(tx, DeviceCap::new(0, false));
    let decider = Decider::new(rx).while_open(c.open());
    decider.finishing();
    for asked in [
        Control::Pause,
        Control::Checkpoint,
        Control::SetBatch(8),
        Control::Stop { checkpoint: true },
    ] {
        assert_eq!(c.send(asked), Err(ControlError::Finishing), "{asked:?}");
    }
    drop(decider);
    assert_eq!(c.pause(), Err(ControlError::Ended));
}

#[test]
fn a_checkpoint_asked_again_before_the_boundary_takes_it_is_refused() {
    let (tx, rx) = unbounded();
    let c = Controller::new(tx, DeviceCap::new(0, false));
    let mut decider = Decider::new(rx).while_open(c.open());
    assert_eq!(c.checkpoint(), Ok(()));
    // (a script's burst: one checkpoint answers them, none is recorded again)
    assert_eq!(c.checkpoint(), Err(ControlError::CheckpointAsked));
    assert!(decider.decide(&mut |_| {}).checkpoint);
    // taken at the boundary: the next is another checkpoint
    assert_eq!(c.checkpoint(), Ok(()));
    assert!(decider.decide(&mut |_| {}).checkpoint);
    assert!(!decider.decide(&mut |_| {}).checkpoint);
}
