//! In-process collectives: ranks are threads of this process and exchange tensors by reference,
//! each copying what it receives to its own device. The transport for ranks sharing a device
//! (the CPU tests, a parallel plan checked on one GPU) and a fallback where NCCL is missing.
//!
//! Ranks that share a GPU share its stream, and libtorch's multi-kernel operations (a split-K
//! GEMM and its reduction, with a workspace shared per stream) are not atomic when two threads
//! enqueue onto one stream at once: measured on the H200, two ranks on one GPU gave outputs
//! that differed run to run. Such ranks therefore take turns ([`Turn`]): a rank holds its
//! device's turn while it enqueues work and gives it up only while it waits in a collective.

use std::sync::{Arc, Condvar, Mutex};

use anyhow::{bail, ensure, Result};
use tch::{Device, Tensor};

use crate::comm::{check_call, Communicator};

/// A group's exchange board: each rank posts its pieces, and once all have, each takes its
/// column. A round ends when every rank has taken; the next starts only then.
struct Board {
    posted: Vec<Option<Vec<Tensor>>>,
    arrived: usize,
    taken: usize,
    /// Set once every rank has posted, until every rank has taken.
    draining: bool,
    round: u64,
    failed: Option<String>,
}

struct Shared {
    board: Mutex<Board>,
    changed: Condvar,
}

/// Exclusive use of a GPU's stream by one of the ranks sharing it.
#[derive(Default)]
pub struct Turn {
    /// The rank holding the turn.
    holder: Mutex<Option<usize>>,
    free: Condvar,
}

impl Turn {
    /// Waits until no rank holds the turn, then holds it as `rank`.
    pub fn take(&self, rank: usize) {
        let mut holder = self.holder.lock().unwrap_or_else(|e| e.into_inner());
        while holder.is_some() {
            holder = self.free.wait(holder).unwrap_or_else(|e| e.into_inner());
        }
        *holder = Some(rank);
    }

    /// Gives the turn up if `rank` holds it (a rank that unwound out of a collective while
    /// waiting does not hold it, and must not free another rank's).
    pub fn give(&self, rank: usize) {
        let mut holder = self.holder.lock().unwrap_or_else(|e| e.into_inner());
        if *holder == Some(rank) {
            *holder = None;
            self.free.notify_all();
        }
    }
}

/// One rank of a [`group`].
pub struct LocalComm {
    shared: Arc<Shared>,
    rank: usize,
    size: usize,
    device: Device,
    /// The turn this rank holds while it runs (ranks sharing a GPU), given up while it waits.
    turn: Option<Arc<Turn>>,
}

/// A group of ranks on `devices` (rank `i` on `devices[i]`).
pub fn group(devices: &[Device]) -> Vec<LocalComm> {
    group_with_turns(devices, &vec![None; devices.len()])
}

/// [`group`] for ranks that take turns on a shared GPU: `turns[i]` is rank `i`'s (which its
/// worker holds while the rank runs).
pub fn group_with_turns(devices: &[Device], turns: &[Option<Arc<Turn>>]) -> Vec<LocalComm> {
    let n = devices.len();
    let shared = Arc::new(Shared {
        board: Mutex::new(Board {
            posted: (0..n).map(|_| None).collect(),
            arrived: 0,
            taken: 0,
            draining: false,
            round: 0,
            failed: None,
        }),
        changed: Condvar::new(),
    });
    devices
        .iter()
        .zip(turns)
        .enumerate()
        .map(|(rank, (&device, turn))| LocalComm {
            shared: Arc::clone(&shared),
            rank,
            size: n,
            device,
            turn: turn.clone(),
        })
        .collect()
}

impl LocalComm {
    fn wait<'a>(
        &self,
        mut b: std::sync::MutexGuard<'a, Board>,
        until: impl Fn(&Board) -> bool,
    ) -> Result<std::sync::MutexGuard<'a, Board>> {
        loop {
            if let Some(why) = &b.failed {
                bail!("rank {}: the group was aborted: {why}", self.rank);
            }
            if until(&b) {
                return Ok(b);
            }
            b = self.shared.changed.wait(b).unwrap_or_else(|e| e.into_inner());
        }
    }
}

impl Communicator for LocalComm {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }

    fn all_to_all(&self, send: &[Tensor], recv_shapes: &[Vec<i64>]) -> Result<Vec<Tensor>> {
        check_call(self, send, recv_shapes)?;
        if let Some(t) = &self.turn {
            t.give(self.rank);
        }
        let column = self.post_and_take(send);
        if let Some(t) = &self.turn {
            t.take(self.rank);
        }
        let column = column?;
        let mut out = Vec::with_capacity(self.size);
        for (i, (t, want)) in column.into_iter().zip(recv_shapes).enumerate() {
            ensure!(
                t.size() == *want,
                "rank {}: rank {i} sent a piece of shape {:?} where {want:?} was expected",
                self.rank,
                t.size()
            );
            out.push(if t.device() == self.device { t } else { t.to_device(self.device) });
        }
        Ok(out)
    }

    fn abort(&self, reason: &str) {
        let mut b = self.shared.board.lock().unwrap_or_else(|e| e.into_inner());
        b.failed.get_or_insert_with(|| format!("rank {}: {reason}", self.rank));
        self.shared.changed.notify_all();
    }
}

impl LocalComm {
    /// Posts this rank's pieces and takes what the others posted for it, once all have posted.
    fn post_and_take(&self, send: &[Tensor]) -> Result<Vec<Tensor>> {
        let lock = self.shared.board.lock().unwrap_or_else(|e| e.into_inner());
        // The previous round must be fully taken before this rank posts to the next.
        let mut b = self.wait(lock, |b| !b.draining)?;
        let round = b.round;
        b.posted[self.rank] = Some(send.iter().map(Tensor::shallow_clone).collect());
        b.arrived += 1;
        if b.arrived == self.size {
            b.draining = true;
            self.shared.changed.notify_all();
        }
        let mut b = self.wait(b, |b| b.draining && b.round == round)?;
        let column: Vec<Tensor> =
            b.posted.iter().map(|p| p.as_ref().expect("every rank posted")[self.rank].shallow_clone()).collect();
        b.taken += 1;
        if b.taken == self.size {
            b.posted.iter_mut().for_each(|p| *p = None);
            (b.arrived, b.taken, b.draining) = (0, 0, false);
            b.round += 1;
            self.shared.changed.notify_all();
        }
        Ok(column)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Kind;

    #[test]
    fn every_rank_receives_its_column_over_many_rounds() {
        let comms = group(&[Device::Cpu; 3]);
        std::thread::scope(|s| {
            for c in &comms {
                s.spawn(move || {
                    for round in 0..50i64 {
                        // Rank r sends (100 r + j + round) to rank j, as a piece of r+1 values.
                        let send: Vec<Tensor> = (0..3)
                            .map(|j| {
                                Tensor::full(
                                    [c.rank() as i64 + 1],
                                    (100 * c.rank() as i64 + j + round) as f64,
                                    (Kind::Float, Device::Cpu),
                                )
                            })
                            .collect();
                        let shapes: Vec<Vec<i64>> = (0..3).map(|i| vec![i + 1]).collect();
                        let got = c.all_to_all(&send, &shapes).unwrap();
                        for (i, t) in got.iter().enumerate() {
                            let want = (100 * i as i64 + c.rank() as i64 + round) as f64;
                            assert_eq!(t.size(), [i as i64 + 1]);
                            assert_eq!(t.min().double_value(&[]), want, "round {round}: from rank {i}");
                        }
                    }
                });
            }
        });
    }

    #[test]
    fn an_abort_releases_the_ranks_waiting_on_the_failed_one() {
        let comms = group(&[Device::Cpu; 2]);
        std::thread::scope(|s| {
            let waiting = s.spawn(|| {
                let t = Tensor::zeros([1], (Kind::Float, Device::Cpu));
                comms[0].all_gather(&t, &[vec![1], vec![1]])
            });
            std::thread::sleep(std::time::Duration::from_millis(20));
            comms[1].abort("out of memory");
            let e = waiting.join().unwrap().unwrap_err().to_string();
            assert!(e.contains("aborted") && e.contains("rank 1: out of memory"), "{e}");
        });
        // And the group stays failed: a later call does not wait either.
        let t = Tensor::zeros([1], (Kind::Float, Device::Cpu));
        assert!(comms[1].all_gather(&t, &[vec![1], vec![1]]).is_err());
    }

    #[test]
    fn a_piece_of_the_wrong_shape_is_an_error_not_a_silent_mixup() {
        let comms = group(&[Device::Cpu; 1]);
        let t = Tensor::zeros([2], (Kind::Float, Device::Cpu));
        let e = comms[0].all_to_all(&[t], &[vec![3]]).unwrap_err().to_string();
        assert!(e.contains("[2]") && e.contains("[3]"), "{e}");
        assert!(comms[0].all_to_all(&[], &[]).unwrap_err().to_string().contains("group of 1"));
    }
}
