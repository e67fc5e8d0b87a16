use super::*;

fn data(n: usize) -> Arc<Dataset> {
    Arc::new(Dataset {
        features: 1,
        classes: 2,
        image: None,
        x: (0..n).map(|i| i as f32).collect(),
        y: vec![0; n],
        names: Vec::new(),
        pictures: None,
    })
}

fn ids(b: &Batch) -> Vec<Vec<f32>> {
    b.micro.iter().map(|m| m.x.clone()).collect()
}

#[test]
fn shards_cover_each_epoch_exactly_once_with_a_short_last_batch() {
    let sh = Sharding {
        per_replica: 3,
        ranks: 2,
        accum: 2,
        split: None,
    };
    let n = 29; // 2 full global batches of 12, then 5
    let mut loaders: Vec<_> = (0..2)
        .map(|r| RankLoader::new(data(n), 5, r, Cursor::default(), sh.clone(), 0, 1).unwrap())
        .collect();
    let mut seen = Vec::new();
    let mut sizes = Vec::new();
    loop {
        let bs: Vec<Batch> = loaders.iter_mut().map(|l| l.next_batch()).collect();
        for b in &bs {
            for m in &b.micro {
                seen.extend(m.x.iter().map(|v| *v as usize));
                sizes.push(m.n);
            }
        }
        if bs[0].epoch_end {
            assert!(bs.iter().all(|b| b.epoch_end && b.global_samples == 5));
            break;
        }
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..n).collect::<Vec<_>>());
    assert_eq!(&sizes[..8], &[3; 8]);
    assert_eq!(sizes[8..].iter().sum::<usize>(), 5);
}

#[test]
fn threaded_prefetch_gives_the_inline_stream_and_epochs_reshuffle() {
    let sh = Sharding {
        per_replica: 4,
        ranks: 3,
        accum: 1,
        split: None,
    };
    let mut inline = RankLoader::new(data(50), 9, 1, Cursor::default(), sh.clone(), 0, 1).unwrap();
    let mut threaded = RankLoader::new(data(50), 9, 1, Cursor::default(), sh, 4, 3).unwrap();
    let a: Vec<_> = (0..20).map(|_| ids(&inline.next_batch())).collect();
    let b: Vec<_> = (0..20).map(|_| ids(&threaded.next_batch())).collect();
    assert_eq!(a, b);
    assert_ne!(a[0], a[5], "epoch 2 should be reshuffled"); // 5 steps per epoch
}

#[test]
fn batches_built_in_recycled_buffers_are_the_same_stream() {
    let sh = Sharding {
        per_replica: 5,
        ranks: 2,
        accum: 2,
        split: None,
    };
    let (n, steps) = (37, 30); // short last batches: recycled buffers longer than needed
    let mut plain = RankLoader::new(data(n), 3, 0, Cursor::default(), sh.clone(), 0, 1).unwrap();
    let want: Vec<_> = (0..steps).map(|_| ids(&plain.next_batch())).collect();
    for (prefetch, threads) in [(0, 1), (3, 2)] {
        let mut l = RankLoader::new(
            data(n),
            3,
            0,
            Cursor::default(),
            sh.clone(),
            prefetch,
            threads,
        )
        .unwrap();
        let got: Vec<_> = (0..steps)
            .map(|_| {
                let mut b = l.next_batch();
                let x = ids(&b);
                l.recycle(&mut b.micro);
                assert!(
                    b.micro.iter().all(|m| m.x.is_empty()),
                    "buffers handed back"
                );
                x
            })
            .collect();
        assert_eq!(got, want, "prefetch {prefetch}, {threads} threads");
    }
}

#[test]
fn restart_switches_shapes_at_the_given_cursor() {
    let sh = Sharding {
        per_replica: 2,
        ranks: 1,
        accum: 1,
        split: None,
    };
    let mut l = RankLoader::new(data(20), 1, 0, Cursor::default(), sh.clone(), 3, 2).unwrap();
    let first = l.next_batch();
    let big = Sharding {
        per_replica: 5,
        ..sh
    };
    l.restart(first.next, big.clone());
    let second = l.next_batch();
    assert_eq!(
        second.start,
        Cursor {
            epoch: 0,
            offset: 2
        }
    );
    assert_eq!(second.micro[0].n, 5);
    let mut reference = RankLoader::new(
        data(20),
        1,
        0,
        Cursor {
            epoch: 0,
            offset: 2,
        },
        big,
        0,
        1,
    )
    .unwrap();
    assert_eq!(ids(&second), ids(&reference.next_batch()));
}

#[test]
fn an_uneven_split_tiles_every_global_batch_exactly() {
    let sh = Sharding {
        per_replica: 32,
        ranks: 3,
        accum: 2,
        split: Some(Arc::new(vec![40, 17, 39])),
    };
    for m in [192, 191, 100, 7, 1] {
        let mut covered = vec![0u32; m];
        for micro in 0..2 {
            for rank in 0..3 {
                let (start, len) = sh.piece(m, micro, rank);
                for c in &mut covered[start..start + len] {
                    *c += 1;
                }
            }
        }
        assert!(covered.iter().all(|&c| c == 1), "m={m}: {covered:?}");
    }
    // a full batch gives each rank exactly its share in every micro-batch
    assert_eq!(sh.piece(192, 1, 1), (96 + 40, 17));
    assert_eq!(proportional(10, &[1, 1, 1]), vec![4, 3, 3]);
}

#[test]
fn restarts_under_threaded_prefetch_never_skip_or_repeat_a_batch() {
    let shapes = [
        Sharding {
            per_replica: 3,
            ranks: 2,
            accum: 1,
            split: None,
        },
        Sharding {
            per_replica: 3,
            ranks: 2,
            accum: 1,
            split: Some(Arc::new(vec![4, 2])),
        },
    ];
    let mut l =
        RankLoader::new(data(97), 3, 1, Cursor::default(), shapes[0].clone(), 4, 1).unwrap();
    let mut at = Cursor::default();
    for i in 0..600 {
        if i % 3 == 0 {
            // the producer is usually ahead, racing the restart
            l.restart(at, shapes[(i / 3) % 2].clone());
        }
        let b = l.next_batch();
        assert_eq!(b.start, at, "batch {i}");
        at = b.next;
    }
}

#[test]
fn rows_name_the_samples_and_rows_only_drops_the_features_not_the_order() {
    let sh = Sharding {
        per_replica: 4,
        ranks: 2,
        accum: 2,
        split: None,
    };
    // x of sample i is i: a micro-batch's features are its rows
    let mut reference =
        RankLoader::new(data(40), 3, 1, Cursor::default(), sh.clone(), 0, 1).unwrap();
    let mut held = RankLoader::new(data(40), 3, 1, Cursor::default(), sh, 3, 2).unwrap();
    for step in 0..16 {
        if step == 2 {
            held.rows_only();
        }
        let (want, mut got) = (reference.next_batch(), held.next_batch());
        for (w, g) in want.micro.iter().zip(&got.micro) {
            let rows: Vec<f32> = w.rows.iter().map(|&r| r as f32).collect();
            assert_eq!(w.x, rows, "step {step}");
            assert_eq!((&g.rows, g.n), (&w.rows, w.n), "step {step}");
            // batches built before the switch (prefetched) may still carry features
            assert!(g.x.is_empty() || g.x == w.x, "step {step}");
            // at most 2 queued and 1 in the making per thread were built before the switch
            if step >= 2 + 6 {
                assert!(g.x.is_empty(), "step {step}: features after rows_only");
            }
        }
        // handed-back buffers never turn a rows-only batch into one with features
        held.recycle(&mut got.micro);
    }
}

#[test]
fn an_epoch_s_and_the_run_s_last_steps_follow_the_batch() {
    // 1000 samples, 2 ranks x 32 = 64 a step: 16 steps an epoch (15 of 64, one of 40)
    let sh = Sharding {
        per_replica: 32,
        ranks: 2,
        accum: 1,
        split: None,
    };
    let at = |epoch, offset| Cursor { epoch, offset };
    let ends = |epoch, run| EndsAt { epoch, run };
    let three = Budget::Epochs(3);
    // 8 steps into the first epoch: 512 samples
    assert_eq!(sh.ends_at(8, at(0, 512), 1000, three), ends(16, 48));
    // just after an epoch's end, the next epoch is counted whole
    assert_eq!(sh.ends_at(16, at(1, 0), 1000, three), ends(32, 48));
    // the last epoch's end is the run's
    assert_eq!(sh.ends_at(42, at(2, 640), 1000, three), ends(48, 48));
    assert_eq!(sh.ends_at(48, at(3, 0), 1000, three), ends(64, 48));
    // a step budget's end is its last step; its epochs end where the batch puts them
    assert_eq!(
        sh.ends_at(20, at(1, 256), 1000, Budget::Steps(300)),
        ends(32, 300)
    );
    // the batch halved at step 8: the rest of the epoch and the later ones take twice the steps
    let half = Sharding {
        per_replica: 16,
        ..sh.clone()
    };
    assert_eq!(
        half.ends_at(8, at(0, 512), 1000, three),
        ends(24, 24 + 2 * 32)
    );
    // accumulated micro-batches count in the global batch
    let accum = Sharding { accum: 2, ..sh };
    assert_eq!(
        accum.ends_at(4, at(0, 512), 1000, three),
        ends(8, 8 + 2 * 8)
    );
}
