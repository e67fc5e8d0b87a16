//! A fixed, deterministic run fed into an `App`: the data of the snapshot tests and of the
//! frame-time benchmark. Nothing here reads a clock or the machine.

use std::path::PathBuf;
use std::time::Duration;

use crate::engine::events::{Applied, EndsAt, Event, StepStats};
use crate::engine::{Device, RunInfo};
use crate::nn::precision::Precision;
use crate::observe::sample::DeviceSample;

use super::app::App;
use crate::front::watch::Watch;
use crate::observe::telemetry::Telemetry;
use crate::observe::Recorder;

fn ms(v: f64) -> Duration {
    Duration::from_secs_f64(v / 1e3)
}

/// One rank's step: rank 2 computes more slowly, the others wait for it.
pub fn step(rank: usize, ranks: usize, step: u64) -> StepStats {
    let wobble = ((step * 7 + rank as u64 * 3) % 11) as f64 / 10.0;
    let compute = if rank == 2 { 2.4 } else { 1.6 } + 0.2 * wobble;
    let slowest = if ranks > 2 { 2.6 } else { 1.8 };
    let data = 0.05 + 0.02 * wobble;
    let comm = 0.15;
    let wait = (slowest - compute).max(0.0);
    let step_time = data + compute + comm + wait + 0.1;
    let global = 32 * ranks;
    let steps_per_epoch = 1438u64.div_ceil(global as u64);
    StepStats {
        rank,
        step,
        epoch: (step - 1) / steps_per_epoch + 1,
        samples: 32,
        global_samples: global,
        per_replica: 32,
        loss: (2.3 * (-(step as f32) / 40.0).exp() + 0.05 + 0.02 * wobble as f32),
        accuracy: 0.9,
        // (steep at the start, then settling with the batches' noise)
        grad_norm: 0.3 + 2.0 * (-(step as f32) / 25.0).exp() + 0.1 * wobble as f32,
        lr: 1e-3,
        data_wait: ms(data),
        // (rank 3's loader threads at their limit, the others half busy)
        loader_busy: Some(ms(
            step_time * if rank == 3 { 0.92 } else { 0.5 + 0.1 * wobble }
        )),
        compute: ms(compute - 0.1),
        compute_cpu: None,
        device_timed: false,
        comm: ms(comm),
        sync_wait: ms(wait),
        transfer: Duration::ZERO,
        optimizer: ms(0.1),
        step_time: ms(step_time),
        at: ms(step as f64 * 4.0),
        after_pause: false,
        paused: false,
        progress: step as f64 / (30 * steps_per_epoch) as f64,
        ends_at: Some(EndsAt {
            epoch: step.div_ceil(steps_per_epoch).max(1) * steps_per_epoch,
            run: 30 * steps_per_epoch,
        }),
    }
}

/// A demo run's screen and the watch its steps go through, as a run in this process's do (it
/// records nothing and reads nothing of the machine).
pub struct Demo {
    pub app: App,
    watch: Watch,
}

impl Demo {
    pub fn new(info: RunInfo) -> Demo {
        // (the ranks' samples come through `step`: no channel)
        let (_, steps) = crossbeam_channel::bounded(0);
        let telemetry = Telemetry::of_steps(info.ranks());
        let watch = Watch::new(&info, steps, Recorder::none(), telemetry);
        let mut demo = Demo {
            app: App::new(info, false),
            watch,
        };
        demo.show();
        demo
    }

    fn show(&mut self) {
        super::source::show(&mut self.app, self.watch.take());
    }

    /// One rank's step sample.
    pub fn step(&mut self, s: StepStats) {
        self.watch.step(s);
        self.show();
    }

    pub fn event(&mut self, ev: Event, t: Duration) {
        self.watch.event(ev, t);
        self.show();
    }

    pub fn telemetry(&mut self, t: Duration, devices: Vec<DeviceSample>, memory: (u64, u64)) {
        self.watch.sampled(t, devices, Some(memory));
        self.show();
    }

    /// A demo of `info` whose ranks have started.
    fn started(info: RunInfo) -> Demo {
        let ranks = info.ranks();
        let mut demo = Demo::new(info);
        let started = Event::Started {
            ranks,
            per_replica: 32,
            params: 9610,
            start_step: 0,
            start_epoch: 0,
        };
        demo.event(started, Duration::ZERO);
        demo
    }
}

/// An app that has seen `steps` steps of a `devices`-rank run, epochs with validation, a
/// checkpoint, a pause, a batch change being asked for, and telemetry.
pub fn app(devices: usize, steps: u64) -> App {
    run(devices, steps).app
}

/// `app`'s run, to go on with.
pub fn run(devices: usize, steps: u64) -> Demo {
    let mut demo = Demo::started(RunInfo::example(devices));
    let steps_per_epoch = 1438u64.div_ceil(32 * devices as u64);
    for s in 1..=steps {
        for r in 0..devices {
            demo.step(step(r, devices, s));
        }
        let at = ms(s as f64 * 4.0);
        if s % 25 == 0 {
            let devices = (0..devices)
                .map(|r| DeviceSample {
                    util: Some(if r == 2 {
                        0.93
                    } else {
                        0.62 + 0.01 * ((s / 25) % 5) as f32
                    }),
                    ..DeviceSample::default()
                })
                .collect();
            demo.telemetry(at, devices, (48 << 20, 24 << 30));
        }
        if s % steps_per_epoch == 0 {
            let epoch = s / steps_per_epoch;
            let done = Event::EpochDone {
                epoch,
                step: s,
                train_loss: 0.5 / epoch as f32,
                val_loss: Some(0.45 / epoch as f32 + 0.04),
                val_accuracy: Some(0.93 + 0.01 * epoch.min(4) as f32),
                elapsed: at,
            };
            demo.event(done, at);
        }
        if s == 60 {
            let checkpoint = Event::Checkpoint {
                step: 60,
                path: PathBuf::from("checkpoints/step-00000060"),
                best: None,
            };
            demo.event(checkpoint, at);
            for applied in [Applied::Paused, Applied::Resumed] {
                demo.event(Event::Control { step: 60, applied }, at);
            }
        }
    }
    demo
}

/// `app(devices, steps)` followed by `extra` steps in which rank `slow` works twice as long
/// as the others (20 ms vs 10 ms), so the detector flags it.
pub fn app_with_straggler(devices: usize, steps: u64, extra: u64, slow: usize) -> App {
    let mut demo = run(devices, steps);
    for s in steps + 1..=steps + extra {
        for r in 0..devices {
            let mut st = step(r, devices, s);
            let work = if r == slow { 20.0 } else { 10.0 };
            st.compute = ms(work);
            st.sync_wait = ms(20.0 - work);
            st.step_time = ms(20.5);
            st.at = ms(600.0 + (s - steps) as f64 * 20.5);
            demo.step(st);
        }
    }
    demo.app
}

/// The same run on GPUs (H100s), with NVML samples: rank 1 is power-capped and clocked down.
pub fn gpu_app(devices: usize, steps: u64) -> App {
    let mut info = RunInfo::example(devices);
    info.devices = (0..devices)
        .map(|index| Device::Gpu {
            index,
            name: "NVIDIA H100 80GB HBM3".into(),
            pci_bus_id: Some(format!("00000000:{:02x}:00.0", 0x18 + index)),
            arch: 90,
        })
        .collect();
    // what H100s compute in by default, on pictures decoded batch by batch
    info.precision = Precision::Tf32;
    (info.pictures, info.loader_threads, info.prefetch) = (true, 8, 4);
    info.data = "images scans: 1797 images, 1x8x8, 10 classes".into();
    let mut demo = Demo::started(info);
    for s in 1..=steps {
        for r in 0..devices {
            demo.step(step(r, devices, s));
        }
        if s % 25 == 0 {
            let samples = (0..devices)
                .map(|r| {
                    let capped = r == 1;
                    DeviceSample {
                        util: Some(if capped {
                            0.99
                        } else {
                            0.71 + 0.01 * ((s / 25) % 5) as f32
                        }),
                        mem_access: Some(if capped { 0.35 } else { 0.42 }),
                        mem_used: Some(((21 + r as u64) << 30) + (s << 24)),
                        mem_total: Some(80 << 30),
                        temp_c: Some(if capped { 83.0 } else { 61.0 + r as f32 }),
                        power_w: Some(if capped { 700.0 } else { 455.0 }),
                        power_limit_w: Some(700.0),
                        sm_clock_mhz: Some(if capped { 1245 } else { 1980 }),
                        sm_clock_max_mhz: Some(1980),
                        throttle_reasons: Some(if capped { 0x4 } else { 0x0 }),
                        pcie_rx_kbs: Some(1_200_000),
                        pcie_tx_kbs: Some(300_000),
                        sm_active: Some(if capped { 0.97 } else { 0.64 }),
                        tensor_active: Some(if capped { 0.02 } else { 0.01 }),
                    }
                })
                .collect();
            demo.telemetry(ms(s as f64 * 4.0), samples, (1 << 30, 2 << 40));
        }
    }
    demo.app
}
