//! What ranks exchange: one collective, the all-to-all, which also serves as an all-gather
//! (the same tensor to every rank). Ulysses attention needs nothing else; pieces may differ in
//! size per rank (a sequence that the degree does not divide).

use anyhow::Result;
use tch::Tensor;

/// One rank's end of a group of ranks. Every rank of the group must call each collective, in
/// the same order; a rank that fails calls [`abort`](Self::abort) so the others stop waiting.
pub trait Communicator: Send + Sync {
    /// This rank's index in the group, 0-based.
    fn rank(&self) -> usize;
    /// How many ranks the group has.
    fn size(&self) -> usize;

    /// `send[j]` goes to rank `j`; returns what each rank sent to this one, in rank order, on
    /// this rank's device, with the shapes `recv_shapes[i]` (of the same dtype as `send`).
    fn all_to_all(&self, send: &[Tensor], recv_shapes: &[Vec<i64>]) -> Result<Vec<Tensor>>;

    /// Every rank's `t`, in rank order (`shapes[i]` is rank `i`'s shape).
    fn all_gather(&self, t: &Tensor, shapes: &[Vec<i64>]) -> Result<Vec<Tensor>> {
        let send: Vec<Tensor> = (0..self.size()).map(|_| t.shallow_clone()).collect();
        self.all_to_all(&send, shapes)
    }

    /// Marks this rank's end failed. In-process groups release every rank waiting in a
    /// collective with an error carrying `reason`; an NCCL communicator is aborted, which stops
    /// its kernels still waiting for a peer (the pool aborts every rank's end when one fails).
    fn abort(&self, reason: &str);
}

/// Checks the call's shape before any rank waits on it: a wrong count is a bug that would
/// otherwise hang the group.
pub(crate) fn check_call(c: &dyn Communicator, send: &[Tensor], recv_shapes: &[Vec<i64>]) -> Result<()> {
    anyhow::ensure!(
        send.len() == c.size() && recv_shapes.len() == c.size(),
        "all-to-all on a group of {}: {} pieces to send, {} shapes to receive",
        c.size(),
        send.len(),
        recv_shapes.len()
    );
    Ok(())
}
