//! State the front and the executor both touch: which request ids are live, the drain flag and
//! the cost model. Kept behind locks so admission can answer without a round trip to the executor.

use std::collections::HashSet;
use std::sync::atomic::AtomicBool;
use std::sync::Mutex;

use tokio::sync::watch;

use crate::cost::CostModel;

pub(super) struct Shared {
    pub(super) live: Mutex<HashSet<String>>,
    pub(super) draining: AtomicBool,
    pub(super) cost: Mutex<CostModel>,
    pub(super) live_count: watch::Sender<usize>,
}

impl Shared {
    pub(super) fn release(&self, id: &str) {
        let mut live = self.live.lock().unwrap();
        live.remove(id);
        self.live_count.send_replace(live.len());
    }
}
