//! Several devices serving one model (issue 18; docs/operators.md "Several GPUs").
//!
//! One process drives every device, one worker thread per rank ([`RankPool`]). The engine's
//! executor thread is the only place a unit is decided: a parallel forward is a function call
//! that hands each rank its part and waits for all of them, so there is no decision protocol
//! between processes to keep consistent, weights are read from disk once, and a failure on any
//! rank fails that forward on every rank: in-process groups release the ranks waiting for the
//! failed one at once; NCCL groups are connected (and warmed up) before any forward so a
//! healthy rank only enqueues and returns, and the pool then aborts the group, which stops
//! kernels left waiting for the failed peer (with a timeout for a rank that never returns).
//! Inputs and outputs (megabytes per step) cross devices as peer copies; the
//! all-to-alls inside attention (the heavy traffic) go through a [`Communicator`]: NCCL between
//! distinct GPUs ([`nccl`]), in-process copies on one device or the CPU ([`local`]), which is
//! what the CPU tests and single-GPU runs of a parallel plan use.

#![deny(missing_docs)]

pub mod check;
pub mod comm;
pub mod local;
pub mod nccl;
pub mod plan;
pub mod pool;

pub use comm::Communicator;
pub use plan::{ParallelMode, ParallelPlan};
pub use pool::{RankJob, RankPool};
