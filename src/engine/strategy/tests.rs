use super::*;

#[test]
fn parses_every_strategy_and_refuses_bad_ones_naming_the_fix() {
    assert_eq!("mirrored".parse::<Strategy>(), Ok(Strategy::Mirrored));
    assert_eq!(
        "central-storage".parse::<Strategy>(),
        Ok(Strategy::CentralStorage)
    );
    let l = "local-sgd:8".parse::<Strategy>().unwrap();
    assert_eq!(
        l,
        Strategy::LocalSgd {
            every: 8,
            warmup: DEFAULT_LOCAL_SGD_WARMUP,
            moments: false
        }
    );
    assert_eq!(l.to_string(), "local-sgd:8");
    let m = "local-sgd:4,moments".parse::<Strategy>().unwrap();
    assert_eq!(m.to_string(), "local-sgd:4,moments");
    assert_eq!(m.to_string().parse::<Strategy>(), Ok(m));
    for (bad, says) in [
        ("local-sgd:0", "from 1 to"),
        ("local-sgd:x", "whole number"),
        ("local-sgd:-3", "whole number"),
        ("local-sgd", "e.g. local-sgd:8"),
        ("local-sgd:8,fast", "unknown option `fast`"),
        ("local-sgd:8,moments,x", "unknown option `x`"),
        ("central_storage", "did you mean central-storage?"),
        ("Local-SGD:8", "did you mean local-sgd?"),
        ("ring", "use mirrored, central-storage, or local-sgd:H"),
    ] {
        let e = bad.parse::<Strategy>().unwrap_err();
        assert!(e.contains(says) && e.contains(bad), "{bad}: {e}");
    }
    let e = Strategy::Mirrored.with_warmup(10).unwrap_err();
    assert!(
        e.contains("--local-sgd-warmup") && e.contains("local-sgd:8"),
        "{e}"
    );
}

#[test]
fn local_sgd_syncs_every_step_of_its_warm_up_then_every_h() {
    let s = "local-sgd:4"
        .parse::<Strategy>()
        .unwrap()
        .with_warmup(3)
        .unwrap();
    let synced: Vec<u64> = (1..=12).filter(|&t| s.synced_after(t)).collect();
    assert_eq!(synced, vec![1, 2, 3, 7, 11]);
    assert_eq!(s.next_sync(2), None);
    assert_eq!(s.next_sync(3), Some(7));
    assert_eq!(s.next_sync(6), Some(7));
    assert_eq!(s.next_sync(7), Some(11));
    assert!((1..=5).all(|t| Strategy::CentralStorage.synced_after(t)));
}

#[test]
fn central_storage_keeps_the_optimizer_state_on_the_host_only() {
    use crate::backend::TrainState;
    use crate::config::RunConfig;
    use crate::nn::optim::{OptState, Optimizer, OptimizerKind};
    let adam = Optimizer::new(OptimizerKind::Adam, 0.0);
    let state = TrainState {
        params: vec![1.0; 10],
        opt: OptState::new(OptimizerKind::Adam, 10),
        buffers: vec![0.5, 2.0],
    };
    let cfg = RunConfig {
        strategy: Strategy::CentralStorage,
        ..RunConfig::default()
    };
    let (store, device) = Store::for_run(&cfg, &adam, state.clone());
    // (the running statistics stay on the devices, which start from the state's)
    assert_eq!(store.expect("a store").export(vec![0.5, 2.0]), state);
    assert_eq!(
        (&device.params, &device.buffers),
        (&state.params, &state.buffers)
    );
    assert!(device.opt.m.is_empty() && device.opt.v.is_empty());
    let (store, device) = Store::for_run(&RunConfig::default(), &adam, state.clone());
    assert!(store.is_none());
    assert_eq!(device, state);
}

#[test]
fn running_statistics_weigh_by_each_replica_s_part_of_the_batch() {
    use crate::comm::LocalCollective;
    // rank 0 took 96 of 128 samples, rank 1 32: its statistics weigh a quarter
    let stats = [vec![1.0f32, 4.0], vec![5.0, 8.0]];
    let shares = [0.75f32, 0.25];
    let got: Vec<Vec<f32>> = std::thread::scope(|s| {
        let ranks: Vec<_> = (LocalCollective::group(2).into_iter().enumerate())
            .map(|(r, mut c)| {
                let mine = stats[r].clone();
                s.spawn(move || super::runner::average_buffers(mine, &mut c, shares[r]).unwrap())
            })
            .collect();
        ranks.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for averaged in got {
        assert_eq!(averaged, vec![2.0, 5.0]);
    }
}
