//! The per-request meter of time spent in sandboxed policies. Its own module because every kind
//! of policy (guidance, block, step, observer, reward) takes it, so none of them owns it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Wall time a request has spent inside sandboxed policies (plugins), shared by all of the
/// request's policy states. The driver makes one per run and hands it to every policy's `init`;
/// the plugin host charges each call to it and enforces the per-request budget against it, and
/// the driver reads it into `RequestMetrics::plugin_seconds`. Native policies ignore it.
#[derive(Debug, Clone, Default)]
pub struct PluginMeter(Arc<AtomicU64>);

impl PluginMeter {
    /// Adds one call's time.
    pub fn charge(&self, spent: Duration) {
        self.0.fetch_add(spent.as_micros() as u64, Ordering::Relaxed);
    }

    /// All the time charged so far.
    pub fn used(&self) -> Duration {
        Duration::from_micros(self.0.load(Ordering::Relaxed))
    }
}
