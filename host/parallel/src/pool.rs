//! The rank workers: one thread per rank, each running the part of a forward its rank owns.
//! The caller (the engine's executor thread, i.e. rank 0's decider) hands every rank a job and
//! waits for all of them; a rank that fails or panics aborts its group, so the others return
//! too, and the pool rebuilds its communicators before the next forward.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use tch::{Device, Tensor};

use crate::comm::Communicator;
use crate::local::Turn;
use crate::plan::ParallelPlan;
use crate::{local, nccl};

/// What a rank's job sees: its rank, device and its sequence-parallel group's communicator.
pub struct RankCtx {
    /// Its global rank (see [`ParallelPlan::position`]).
    pub rank: usize,
    /// The device the rank computes on.
    pub device: Device,
    /// Its sequence-parallel group's communicator, with ranks numbered within the group.
    pub comm: Arc<dyn Communicator>,
}

/// One rank's part of a forward.
pub type RankJob = Box<dyn FnOnce(&RankCtx) -> Result<Tensor> + Send>;

/// How a group of ranks exchanges tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// NCCL between distinct GPUs.
    Nccl,
    /// In-process copies, for ranks on one device or the CPU.
    Local,
}

impl Transport {
    /// NCCL when the group's ranks are on distinct GPUs, else in-process copies.
    /// `FASTVIDEO_COLLECTIVE=local` forces the copies (a fallback, and a comparison).
    pub fn for_devices(devices: &[Device]) -> Self {
        let forced = std::env::var("FASTVIDEO_COLLECTIVE").ok();
        let mut ordinals: Vec<usize> =
            devices.iter().filter_map(|d| if let Device::Cuda(i) = d { Some(*i) } else { None }).collect();
        ordinals.sort_unstable();
        ordinals.dedup();
        if forced.as_deref() == Some("local") || devices.len() < 2 || ordinals.len() != devices.len() {
            Transport::Local
        } else {
            Transport::Nccl
        }
    }
}

/// A job with the run it belongs to (results of an abandoned run are recognised and dropped).
type Task = (u64, RankJob, Arc<dyn Communicator>, Option<Arc<Turn>>);
type Done = (u64, usize, Result<Tensor>);

struct Worker {
    jobs: Sender<Task>,
    thread: Option<JoinHandle<()>>,
}

struct Inner {
    workers: Vec<Worker>,
    results: Receiver<Done>,
    /// Each rank's group communicator; `None` after a failure, rebuilt on the next run.
    comms: Option<Vec<Arc<dyn Communicator>>>,
    runs: u64,
}

/// How long a forward may take on a rank before the pool gives up on it (aborting its
/// communicators, which stops NCCL kernels waiting for a peer): `FASTVIDEO_RANK_TIMEOUT_S`,
/// default 30 minutes (a 14B forward at 720p takes seconds). Once one rank has failed, the others
/// get [`GRACE`] to return before their groups are aborted under them.
fn rank_timeout() -> Duration {
    let secs = std::env::var("FASTVIDEO_RANK_TIMEOUT_S").ok().and_then(|v| v.parse().ok()).unwrap_or(1800);
    Duration::from_secs(secs)
}

const GRACE: Duration = Duration::from_secs(30);

/// The worker threads of a [`ParallelPlan`]'s ranks.
pub struct RankPool {
    /// The degrees the pool was built for.
    pub plan: ParallelPlan,
    /// Rank `r`'s device.
    pub devices: Vec<Device>,
    /// How its groups exchange tensors, chosen from the devices ([`Transport::for_devices`]).
    pub transport: Transport,
    /// Rank `r`'s turn on a GPU it shares with other ranks (see [`local`]).
    turns: Vec<Option<Arc<Turn>>>,
    inner: Mutex<Inner>,
}

impl RankPool {
    /// Starts one worker per rank (rank `r` on `devices[r]`) and connects each
    /// sequence-parallel group.
    pub fn new(plan: ParallelPlan, devices: Vec<Device>) -> Result<Self> {
        anyhow::ensure!(devices.len() == plan.ranks(), "{} devices for {} ranks", devices.len(), plan.ranks());
        // Groups of one exchange nothing; otherwise NCCL only if every group can use it.
        let nccl = plan.sp > 1 && devices.chunks(plan.sp).all(|g| Transport::for_devices(g) == Transport::Nccl);
        let transport = if nccl { Transport::Nccl } else { Transport::Local };
        let (done_tx, results) = channel();
        let mut workers = Vec::with_capacity(devices.len());
        for (rank, &device) in devices.iter().enumerate() {
            let (jobs, rx) = channel::<Task>();
            let done = done_tx.clone();
            let thread = std::thread::Builder::new()
                .name(format!("fastvideo-rank-{rank}"))
                .spawn(move || worker(rank, device, rx, done))
                .map_err(|e| anyhow!("starting rank {rank}'s thread: {e}"))?;
            workers.push(Worker { jobs, thread: Some(thread) });
        }
        let mut shared: HashMap<Device, Arc<Turn>> = HashMap::new();
        for d in &devices {
            if d.is_cuda() && devices.iter().filter(|x| *x == d).count() > 1 {
                shared.entry(*d).or_default();
            }
        }
        let turns = devices.iter().map(|d| shared.get(d).cloned()).collect();
        let pool = Self {
            plan,
            devices,
            transport,
            turns,
            inner: Mutex::new(Inner { workers, results, comms: None, runs: 0 }),
        };
        let comms = pool.connect()?;
        pool.inner.lock().unwrap_or_else(|e| e.into_inner()).comms = Some(comms);
        tracing::info!(?plan, devices = ?pool.devices, ?transport, "rank workers started");
        Ok(pool)
    }

    /// Connects every group and runs one small exchange on each, so that NCCL's connections
    /// (set up lazily, on a group's first exchange, with every peer taking part) are made here
    /// while every rank is healthy, not inside a forward where a failed rank would leave its
    /// peers waiting for it on the host.
    fn connect(&self) -> Result<Vec<Arc<dyn Communicator>>> {
        let comms = self.groups()?;
        if self.transport == Transport::Nccl {
            std::thread::scope(|s| -> Result<()> {
                let handles: Vec<_> = comms
                    .iter()
                    .zip(&self.devices)
                    .map(|(c, &d)| {
                        s.spawn(move || -> Result<()> {
                            let t = Tensor::zeros([1], (tch::Kind::Float, d));
                            c.all_gather(&t, &vec![vec![1]; c.size()]).map(|_| ())
                        })
                    })
                    .collect();
                for h in handles {
                    h.join().map_err(|_| anyhow!("a rank panicked while connecting"))??;
                }
                Ok(())
            })?;
        }
        Ok(comms)
    }

    fn groups(&self) -> Result<Vec<Arc<dyn Communicator>>> {
        let sp = self.plan.sp;
        let mut comms: Vec<Arc<dyn Communicator>> = Vec::with_capacity(self.devices.len());
        for g in 0..self.plan.cfg {
            let devs = &self.devices[g * sp..(g + 1) * sp];
            match self.transport {
                Transport::Nccl => {
                    let ordinals: Vec<usize> =
                        devs.iter().map(|d| if let Device::Cuda(i) = d { *i } else { unreachable!() }).collect();
                    comms.extend(nccl::group(&ordinals)?.into_iter().map(|c| Arc::new(c) as Arc<dyn Communicator>));
                }
                Transport::Local => comms.extend(
                    local::group_with_turns(devs, &self.turns[g * sp..(g + 1) * sp])
                        .into_iter()
                        .map(|c| Arc::new(c) as Arc<dyn Communicator>),
                ),
            }
        }
        Ok(comms)
    }

    /// Runs `jobs[r]` on rank `r` (a `None` rank sits this forward out, with its whole group)
    /// and returns each rank's output. Any rank's failure is the forward's failure; the
    /// message names the rank.
    pub fn run(&self, jobs: Vec<Option<RankJob>>) -> Result<Vec<Option<Tensor>>> {
        anyhow::ensure!(jobs.len() == self.devices.len(), "{} jobs for {} ranks", jobs.len(), self.devices.len());
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if inner.comms.is_none() {
            inner.comms = Some(self.connect()?);
        }
        let comms = inner.comms.clone().expect("connected");
        inner.runs += 1;
        let run = inner.runs;
        let mut pending = vec![false; self.devices.len()];
        let mut first_error = None;
        for (rank, job) in jobs.into_iter().enumerate() {
            if let Some(job) = job {
                let task = (run, job, Arc::clone(&comms[rank]), self.turns[rank].clone());
                if inner.workers[rank].jobs.send(task).is_err() {
                    first_error = Some(anyhow!("rank {rank}'s worker thread has exited"));
                    break;
                }
                pending[rank] = true;
            }
        }
        let mut out: Vec<Option<Tensor>> = (0..self.devices.len()).map(|_| None).collect();
        let mut deadline = Instant::now() + if first_error.is_some() { GRACE } else { rank_timeout() };
        while pending.contains(&true) {
            let wait = deadline.saturating_duration_since(Instant::now());
            let (id, rank, r) = match inner.results.recv_timeout(wait) {
                Ok(done) => done,
                Err(RecvTimeoutError::Timeout) => {
                    let late: Vec<usize> = (0..pending.len()).filter(|&r| pending[r]).collect();
                    first_error.get_or_insert_with(|| {
                        anyhow!("rank(s) {late:?} did not finish the forward within {:?}", rank_timeout())
                    });
                    break;
                }
                Err(RecvTimeoutError::Disconnected) => bail!("the rank workers have exited"),
            };
            if id != run {
                continue; // a rank of an abandoned run coming back late
            }
            pending[rank] = false;
            match r {
                Ok(t) => out[rank] = Some(t),
                Err(e) => {
                    if first_error.is_none() {
                        deadline = deadline.min(Instant::now() + GRACE);
                    }
                    first_error.get_or_insert(e.context(format!("rank {rank} on {:?}", self.devices[rank])));
                }
            }
        }
        if let Some(e) = first_error {
            // Stop whatever a peer left waiting for the failed rank on the device (NCCL kernels)
            // or on the host, and start the next forward on fresh communicators.
            for c in &comms {
                c.abort("a rank failed this forward");
            }
            inner.comms = None;
            return Err(e);
        }
        Ok(out)
    }
}

fn worker(rank: usize, device: Device, jobs: Receiver<Task>, done: Sender<Done>) {
    while let Ok((run, job, comm, turn)) = jobs.recv() {
        let ctx = RankCtx { rank, device, comm };
        if let Some(t) = &turn {
            t.take(rank);
        }
        let r = catch_unwind(AssertUnwindSafe(|| job(&ctx)));
        if let Some(t) = &turn {
            t.give(rank);
        }
        let r = r.unwrap_or_else(|p| Err(anyhow!("{}", fastvideo_torch::panic_message(p.as_ref()))));
        if let Err(e) = &r {
            // Release the peers waiting on this rank in a collective.
            ctx.comm.abort(&format!("{e:#}"));
        }
        if done.send((run, rank, r)).is_err() {
            return;
        }
    }
}

impl Drop for RankPool {
    fn drop(&mut self) {
        let inner = self.inner.get_mut().unwrap_or_else(|e| e.into_inner());
        let threads: Vec<_> = inner
            .workers
            .drain(..)
            .map(|mut w| {
                drop(w.jobs);
                w.thread.take()
            })
            .collect();
        for t in threads.into_iter().flatten() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Kind;

    fn pool(cfg: usize, sp: usize) -> RankPool {
        let plan = ParallelPlan { cfg, sp };
        RankPool::new(plan, vec![Device::Cpu; plan.ranks()]).unwrap()
    }

    #[test]
    fn each_rank_runs_its_job_and_groups_exchange_within_themselves() {
        let p = pool(2, 2);
        assert_eq!(p.transport, Transport::Local);
        let jobs = (0..4)
            .map(|r| {
                Some(Box::new(move |ctx: &RankCtx| {
                    assert_eq!(ctx.rank, r);
                    let mine = Tensor::from_slice(&[r as f32]);
                    let all = ctx.comm.all_gather(&mine, &[vec![1], vec![1]])?;
                    Ok(Tensor::cat(&all, 0))
                }) as RankJob)
            })
            .collect();
        let out = p.run(jobs).unwrap();
        let got: Vec<Vec<f32>> = out.iter().map(|t| Vec::<f32>::try_from(t.as_ref().unwrap()).unwrap()).collect();
        // Group 0 is ranks 0-1, group 1 ranks 2-3: each sees only its own group.
        assert_eq!(got, vec![vec![0., 1.], vec![0., 1.], vec![2., 3.], vec![2., 3.]]);
    }

    #[test]
    fn a_failing_or_panicking_rank_fails_the_forward_and_the_next_one_runs() {
        let p = pool(1, 3);
        let job = |fail: Option<bool>| -> Option<RankJob> {
            Some(Box::new(move |ctx: &RankCtx| {
                match fail {
                    Some(true) => panic!("CUDA out of memory (simulated)"),
                    Some(false) => anyhow::bail!("bad shape (simulated)"),
                    None => {}
                }
                let t = Tensor::ones([2], (Kind::Float, Device::Cpu));
                let all = ctx.comm.all_gather(&t, &vec![vec![2]; 3])?;
                Ok(Tensor::cat(&all, 0))
            }))
        };
        for fail in [true, false] {
            let e = p.run(vec![job(None), job(Some(fail)), job(None)]).unwrap_err();
            let e = format!("{e:#}");
            assert!(e.contains("rank 1"), "{e}");
            assert!(e.contains("simulated"), "{e}");
            // The ranks that waited on rank 1 came back; the next forward works.
            let out = p.run(vec![job(None), job(None), job(None)]).unwrap();
            assert_eq!(out[2].as_ref().unwrap().sum(Kind::Float).double_value(&[]), 6.0);
        }
    }

    #[test]
    fn a_rank_that_never_returns_times_out_and_its_late_result_is_dropped() {
        // Every other test here finishes in milliseconds, well inside this timeout.
        std::env::set_var("FASTVIDEO_RANK_TIMEOUT_S", "1");
        let p = pool(1, 2);
        let job = |sleep: u64, value: f32| -> Option<RankJob> {
            Some(Box::new(move |_: &RankCtx| {
                std::thread::sleep(std::time::Duration::from_millis(sleep));
                Ok(Tensor::from_slice(&[value]))
            }))
        };
        let e = p.run(vec![job(0, 1.0), job(1500, 2.0)]).unwrap_err().to_string();
        assert!(e.contains("[1] did not finish"), "{e}");
        // Rank 1 is still sleeping; its old result must not be taken for this run's.
        let out = p.run(vec![job(0, 3.0), job(0, 4.0)]).unwrap();
        assert_eq!(out[1].as_ref().unwrap().double_value(&[0]), 4.0);
    }

    #[test]
    fn ranks_can_sit_a_forward_out() {
        let p = pool(2, 1);
        let job: RankJob = Box::new(|ctx: &RankCtx| Ok(Tensor::from_slice(&[ctx.rank as f32])));
        let out = p.run(vec![Some(job), None]).unwrap();
        assert!(out[0].is_some() && out[1].is_none());
    }
}
