//! The plugin engine: one wasmtime `Engine` (pooling allocator, epoch interruption), each
//! enabled plugin compiled and pre-linked once, and a fresh store + instance per (request,
//! plugin) so nothing a plugin keeps in its globals outlives the request.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fastvideo_pipeline::PluginMeter;
use tch::Tensor;
use wasmtime::component::{Component, InstancePre, Linker, Resource};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, Trap};

use crate::bindings::exports::fastvideo::plugin as exports;
use crate::bindings::fastvideo::plugin as imports;
use crate::manifest::{inspect_any, Audit, PluginKind};
use crate::state::{HostState, InstanceLimits, PluginTensor};
use crate::{FailureKind, PluginError};

/// Per-call and per-instance limits (the deploy config's `[limits]`).
#[derive(Debug, Clone, Copy, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Wall-clock budget of one hook call, in milliseconds (epoch ticks of 1 ms).
    pub call_deadline_ms: u64,
    /// The same for a reward's `score`, which runs once per request over the whole video
    /// rather than per step or block.
    pub reward_deadline_ms: u64,
    /// Linear memory one instance may grow to.
    pub memory_bytes: usize,
    /// Wasm fuel per call; none = unmetered (metering costs ~10-20% of guest time).
    pub fuel_per_call: Option<u64>,
    /// Tensor handles one instance may hold at once; asking for more fails the call as `invalid`.
    pub max_tensor_handles: usize,
    /// Most elements one `tensor-read` call copies out; a larger tensor is an error the plugin sees.
    pub max_read_elements: usize,
    /// Log lines and events one instance (one request) may produce; the rest are dropped and
    /// counted, so a chatty plugin cannot flood the logs or a request's stream.
    pub max_log_lines: u32,
    /// Events one instance may emit, on the same terms as `max_log_lines`.
    pub max_events: u32,
    /// Longest log line or event payload kept, in bytes (longer ones are cut).
    pub max_message_bytes: usize,
    /// Instances alive at once across all requests (the pool's size).
    pub max_instances: u32,
    /// Wall-clock milliseconds all plugin calls of one request may take together (every plugin,
    /// every hook); past it the request fails with `budget`. Without it a block plugin that
    /// stays just under the call deadline, called per block per branch per step, could hold the
    /// executor for minutes. 0: no budget.
    pub max_plugin_ms_per_request: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            call_deadline_ms: 50,
            reward_deadline_ms: 2000,
            memory_bytes: 64 << 20,
            fuel_per_call: None,
            max_tensor_handles: 256,
            max_read_elements: 1 << 20,
            max_log_lines: 1000,
            max_events: 10_000,
            max_message_bytes: 4096,
            max_instances: 256,
            max_plugin_ms_per_request: 10_000,
        }
    }
}

/// Stops the epoch thread when the runtime goes away.
struct Ticker(Arc<AtomicBool>);
impl Drop for Ticker {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Called with the seconds of every plugin call (wired to metrics by the server).
pub type CallObserver = Arc<std::sync::OnceLock<Box<dyn Fn(f64) + Send + Sync>>>;

/// The wasmtime engine all of a deploy's plugins are compiled in, with its [`Limits`] and the
/// epoch thread (1 ms ticks) that enforces call deadlines.
pub struct PluginRuntime {
    engine: Engine,
    limits: Limits,
    _ticker: Ticker,
    observer: CallObserver,
    /// Instances alive now (each holds a store, its memory and its tensor handles).
    live: Arc<std::sync::atomic::AtomicUsize>,
}

impl PluginRuntime {
    /// An engine sized and metered by `limits`, and its epoch thread, stopped when the runtime
    /// is dropped. [`PluginError::Io`] if either cannot start.
    pub fn new(limits: Limits) -> Result<Self, PluginError> {
        let mut pool = PoolingAllocationConfig::default();
        pool.total_component_instances(limits.max_instances)
            .total_core_instances(limits.max_instances * 4)
            .total_memories(limits.max_instances * 2)
            .total_tables(limits.max_instances * 4)
            .max_memory_size(limits.memory_bytes);
        let mut config = Config::new();
        config
            .wasm_component_model(true)
            .epoch_interruption(true)
            .consume_fuel(limits.fuel_per_call.is_some())
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&config).map_err(|e| PluginError::Io(format!("plugin engine: {e:#}")))?;
        let stop = Arc::new(AtomicBool::new(false));
        let (e, s) = (engine.clone(), stop.clone());
        std::thread::Builder::new()
            .name("plugin-epoch".into())
            .spawn(move || {
                while !s.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(1));
                    e.increment_epoch();
                }
            })
            .map_err(|e| PluginError::Io(format!("epoch thread: {e}")))?;
        Ok(Self { engine, limits, _ticker: Ticker(stop), observer: Arc::default(), live: Arc::default() })
    }

    /// Reports the wall time of every plugin call to `f` as well (set once). Calls are always
    /// timed (two clock reads, ~50 ns): the time also goes into the request's metrics.
    pub fn observe_calls(&self, f: Box<dyn Fn(f64) + Send + Sync>) {
        let _ = self.observer.set(f);
    }

    /// The limits the runtime was made with.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Compiles a plugin and links exactly the interfaces granted to it. Refuses, listing every
    /// one, imports that are not granted or not provided by this host.
    pub fn load(&self, name: &str, bytes: &[u8], grants: &[String]) -> Result<LoadedPlugin, PluginError> {
        let seen = inspect_any(bytes)?;
        let refuse = |reason: String| PluginError::Refused { plugin: name.to_string(), reason };
        // Every reason at once: the ungranted imports whatever else is wrong with the component.
        let mut reasons = Vec::new();
        let missing = seen.missing_grants(grants);
        if !missing.is_empty() {
            reasons.push(format!("needs capabilities not granted: {}", missing.join(", ")));
        }
        let unknown: Vec<&str> =
            seen.capabilities.iter().map(String::as_str).filter(|c| !PROVIDED.contains(c)).collect();
        if !unknown.is_empty() {
            reasons.push(format!("imports interfaces this host does not provide: {}", unknown.join(", ")));
        }
        reasons.extend(seen.problems.iter().cloned());
        if !reasons.is_empty() {
            return Err(refuse(reasons.join("; ")));
        }
        let audit = seen.into_audit()?;
        let component = Component::new(&self.engine, bytes).map_err(|e| refuse(format!("compile: {e:#}")))?;
        let mut linker = Linker::<HostState>::new(&self.engine);
        link(&mut linker, &audit.capabilities).map_err(|e| refuse(format!("link: {e:#}")))?;
        let pre = linker.instantiate_pre(&component).map_err(|e| refuse(format!("link: {e:#}")))?;
        // Export lookups by name happen once here, not per request.
        let exports = ExportIndices::new(audit.manifest.kind, &pre).map_err(|e| refuse(format!("exports: {e:#}")))?;
        Ok(LoadedPlugin { name: Arc::from(name), audit, pre, exports })
    }

    /// A fresh instance of `plugin` for `req`, its `init` hook called with the request's
    /// parameters (the deploy's defaults overlaid with `plugin_params`). Guiders answer with
    /// their branch vocabulary; other kinds with none.
    pub(crate) fn start(
        &self,
        plugin: &crate::EnabledPlugin,
        req: &fastvideo_request::ResolvedRequest,
        meter: &PluginMeter,
    ) -> Result<(PluginInstance, Vec<String>), PluginError> {
        self.start_streams(plugin, req, meter, &[])
    }

    /// [`Self::start`] for a stream guider, whose `init` also gets the model's `streams` and the
    /// request's resolved knobs.
    pub(crate) fn start_streams(
        &self,
        plugin: &crate::EnabledPlugin,
        req: &fastvideo_request::ResolvedRequest,
        meter: &PluginMeter,
        streams: &[String],
    ) -> Result<(PluginInstance, Vec<String>), PluginError> {
        let params = plugin.params_for(req)?.to_string();
        let knobs = serde_json::to_string(&req.knobs).unwrap_or_else(|_| "{}".into());
        let mut inst = self.instantiate(&plugin.plugin)?;
        inst.meter = Some(meter.clone());
        let none = |r: wasmtime::Result<Result<(), String>>| r.map(|r| r.map(|()| Vec::new()));
        let answer = inst.call("init", |store, g| match g {
            Guest::Guider(g) => g.call_init(store, &params),
            Guest::StreamGuider(g) => g.call_init(store, &params, streams, &knobs),
            Guest::StepInterceptor(g) => none(g.call_init(store, &params)),
            Guest::BlockInterceptor(g) => none(g.call_init(store, &params)),
            Guest::Observer(g) => none(g.call_init(store, &params)),
            Guest::Reward(g) => none(g.call_init(store, &params)),
            Guest::WorkflowTranslator(_) => Ok(Ok(Vec::new())),
            Guest::ExpertRouter(g) => none(g.call_init(store, &params)),
        })?;
        Ok((inst, answer))
    }

    /// Plugin instances alive now, across all requests: back to 0 once requests end.
    pub fn live_instances(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    /// A fresh instance for one request.
    pub fn instantiate(&self, plugin: &LoadedPlugin) -> Result<PluginInstance, PluginError> {
        let l = self.limits;
        let limits = crate::state::MemoryCap { bytes: l.memory_bytes };
        let state = HostState::new(
            plugin.name.clone(),
            InstanceLimits {
                max_handles: l.max_tensor_handles,
                max_read_elements: l.max_read_elements,
                max_log_lines: l.max_log_lines,
                max_events: l.max_events,
                max_message_bytes: l.max_message_bytes,
            },
            limits,
        );
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limits);
        store.set_epoch_deadline(l.call_deadline_ms.max(1));
        // The deadline bounds the plugin's own work. A host op that returns a value from a GPU
        // tensor first waits for every kernel queued before it (on the H200 that can be most of
        // a forward); that wait is handed back to the deadline here instead of failing the call.
        store.epoch_deadline_callback(|mut ctx| match ctx.data_mut().take_device_wait_ticks() {
            0 => Err(Trap::Interrupt.into()),
            ticks => Ok(wasmtime::UpdateDeadline::Continue(ticks)),
        });
        if let Some(fuel) = l.fuel_per_call {
            store.set_fuel(fuel).ok();
        }
        let fail = |kind, message: String| PluginError::Call {
            plugin: plugin.name.to_string(),
            hook: "instantiate",
            kind,
            message,
        };
        let instance = plugin.pre.instantiate(&mut store).map_err(|e| fail(classify(&e), format!("{e:#}")))?;
        let (s, i) = (&mut store, &instance);
        let loaded = match &plugin.exports {
            ExportIndices::Guider(x) => x.load(s, i).map(Guest::Guider),
            ExportIndices::StreamGuider(x) => x.load(s, i).map(Guest::StreamGuider),
            ExportIndices::StepInterceptor(x) => x.load(s, i).map(Guest::StepInterceptor),
            ExportIndices::BlockInterceptor(x) => x.load(s, i).map(Guest::BlockInterceptor),
            ExportIndices::Observer(x) => x.load(s, i).map(Guest::Observer),
            ExportIndices::Reward(x) => x.load(s, i).map(Guest::Reward),
            ExportIndices::WorkflowTranslator(x) => x.load(s, i).map(Guest::WorkflowTranslator),
            ExportIndices::ExpertRouter(x) => x.load(s, i).map(Guest::ExpertRouter),
        };
        let guest = loaded.map_err(|e| fail(FailureKind::Invalid, format!("exports: {e:#}")))?;
        Ok(PluginInstance {
            store,
            guest,
            name: plugin.name.clone(),
            limits: l,
            poisoned: false,
            observer: self.observer.clone(),
            meter: None,
            _live: LiveGuard::new(&self.live),
        })
    }
}

/// Interfaces this host implements (grant names).
pub const PROVIDED: &[&str] = &["tensor", "tensor-ops", "tensor-read", "log", "events", "clock"];

fn link(linker: &mut Linker<HostState>, caps: &[String]) -> wasmtime::Result<()> {
    type D = wasmtime::component::HasSelf<HostState>;
    imports::types::add_to_linker::<HostState, D>(linker, |s| s)?;
    for c in caps {
        match c.as_str() {
            "tensor" => imports::tensor::add_to_linker::<HostState, D>(linker, |s| s)?,
            "tensor-ops" => imports::tensor_ops::add_to_linker::<HostState, D>(linker, |s| s)?,
            "tensor-read" => imports::tensor_read::add_to_linker::<HostState, D>(linker, |s| s)?,
            "log" => imports::log::add_to_linker::<HostState, D>(linker, |s| s)?,
            "events" => imports::events::add_to_linker::<HostState, D>(linker, |s| s)?,
            "clock" => imports::clock::add_to_linker::<HostState, D>(linker, |s| s)?,
            other => wasmtime::bail!("no host implementation of `{other}`"),
        }
    }
    Ok(())
}

/// How a call failed, by the error's type: wasmtime's trap codes, and our own limiter's and
/// host functions' error types (never by message text).
fn classify(e: &wasmtime::Error) -> FailureKind {
    if e.downcast_ref::<crate::state::MemoryCapHit>().is_some() {
        return FailureKind::Memory;
    }
    if e.downcast_ref::<crate::state::HandleCapHit>().is_some() {
        return FailureKind::Invalid;
    }
    match e.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) => FailureKind::Timeout,
        Some(Trap::OutOfFuel) => FailureKind::Fuel,
        _ => FailureKind::Trap,
    }
}

/// A compiled, pre-linked plugin (shared by all requests).
pub struct LoadedPlugin {
    /// The plugin's deploy name, which its errors, logs and events carry.
    pub name: Arc<str>,
    /// What inspecting its bytes found: hash, manifest, imports, exports, capabilities.
    pub audit: Audit,
    pre: InstancePre<HostState>,
    exports: ExportIndices,
}

/// Where the plugin kind's exported functions are, resolved once at load.
enum ExportIndices {
    Guider(exports::guider::GuestIndices),
    StreamGuider(exports::stream_guider::GuestIndices),
    StepInterceptor(exports::step_interceptor::GuestIndices),
    BlockInterceptor(exports::block_interceptor::GuestIndices),
    Observer(exports::observer::GuestIndices),
    Reward(exports::reward::GuestIndices),
    WorkflowTranslator(exports::workflow_translator::GuestIndices),
    ExpertRouter(exports::expert_router::GuestIndices),
}

impl ExportIndices {
    fn new(kind: PluginKind, pre: &InstancePre<HostState>) -> wasmtime::Result<Self> {
        Ok(match kind {
            PluginKind::Guider => Self::Guider(exports::guider::GuestIndices::new(pre)?),
            PluginKind::StreamGuider => Self::StreamGuider(exports::stream_guider::GuestIndices::new(pre)?),
            PluginKind::StepInterceptor => Self::StepInterceptor(exports::step_interceptor::GuestIndices::new(pre)?),
            PluginKind::BlockInterceptor => Self::BlockInterceptor(exports::block_interceptor::GuestIndices::new(pre)?),
            PluginKind::Observer => Self::Observer(exports::observer::GuestIndices::new(pre)?),
            PluginKind::Reward => Self::Reward(exports::reward::GuestIndices::new(pre)?),
            PluginKind::WorkflowTranslator => {
                Self::WorkflowTranslator(exports::workflow_translator::GuestIndices::new(pre)?)
            }
            PluginKind::ExpertRouter => Self::ExpertRouter(exports::expert_router::GuestIndices::new(pre)?),
        })
    }
}

/// The loaded exports of an instance. Rewards and workflow translators are loaded and audited
/// but not yet called (their callers are later issues).
#[allow(dead_code)]
pub(crate) enum Guest {
    Guider(exports::guider::Guest),
    StreamGuider(exports::stream_guider::Guest),
    StepInterceptor(exports::step_interceptor::Guest),
    BlockInterceptor(exports::block_interceptor::Guest),
    Observer(exports::observer::Guest),
    Reward(exports::reward::Guest),
    WorkflowTranslator(exports::workflow_translator::Guest),
    ExpertRouter(exports::expert_router::Guest),
}

/// One request's instance of one plugin. After a failed call it refuses further calls.
pub struct PluginInstance {
    pub(crate) store: Store<HostState>,
    pub(crate) guest: Guest,
    pub(crate) name: Arc<str>,
    limits: Limits,
    poisoned: bool,
    observer: CallObserver,
    /// The request's plugin-time meter, shared by its instances: calls are charged to it and
    /// the per-request budget is checked against it (none for an instance made outside a request).
    meter: Option<PluginMeter>,
    _live: LiveGuard,
}

/// Counts an instance in [`PluginRuntime::live_instances`] while it exists.
struct LiveGuard(Arc<std::sync::atomic::AtomicUsize>);

impl LiveGuard {
    fn new(count: &Arc<std::sync::atomic::AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Self(count.clone())
    }
}

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl PluginInstance {
    /// The plugin's deploy name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The instance's store data: its tensor handles, pending events and output counts.
    pub fn state(&mut self) -> &mut HostState {
        self.store.data_mut()
    }

    /// Runs one hook call under the per-call deadline and fuel, mapping every way it can fail
    /// to a [`PluginError::Call`] naming the plugin and hook.
    pub(crate) fn call<R>(
        &mut self,
        hook: &'static str,
        f: impl FnOnce(&mut Store<HostState>, &Guest) -> wasmtime::Result<Result<R, String>>,
    ) -> Result<R, PluginError> {
        let fail = |kind, message: String| PluginError::Call { plugin: self.name.to_string(), hook, kind, message };
        if self.poisoned {
            return Err(fail(FailureKind::Invalid, "instance discarded after an earlier failure".into()));
        }
        let budget_ms = self.limits.max_plugin_ms_per_request;
        let left_ms = match (budget_ms, &self.meter) {
            (0, _) | (_, None) => u64::MAX,
            (b, Some(m)) => (b as u128 * 1000).saturating_sub(m.used().as_micros()) as u64 / 1000,
        };
        let over = || format!("used its request's plugin budget of {budget_ms} ms (max_plugin_ms_per_request)");
        if left_ms == 0 {
            self.poisoned = true;
            return Err(fail(FailureKind::Budget, over()));
        }
        // The call may run until the per-call deadline or the rest of the request's budget.
        let own = if hook == "score" { self.limits.reward_deadline_ms } else { self.limits.call_deadline_ms };
        let deadline = own.max(1).min(left_ms);
        self.store.set_epoch_deadline(deadline);
        self.store.data_mut().take_device_wait_ticks();
        self.store.data_mut().call_device_wait = Duration::ZERO;
        if let Some(fuel) = self.limits.fuel_per_call {
            self.store.set_fuel(fuel).ok();
        }
        let t = std::time::Instant::now();
        let result = f(&mut self.store, &self.guest);
        // GPU work queued before the hook that a host op waited for is the model's time, not the plugin's.
        let spent = t.elapsed().saturating_sub(self.store.data().call_device_wait);
        if let Some(m) = &self.meter {
            m.charge(spent);
        }
        let seconds = spent.as_secs_f64();
        if let Some(observe) = self.observer.get() {
            observe(seconds);
        }
        match result {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(msg)) => Err(fail(FailureKind::Returned, msg)),
            Err(e) => {
                self.poisoned = true;
                let kind = match classify(&e) {
                    FailureKind::Timeout if deadline < own => FailureKind::Budget,
                    k => k,
                };
                let message = match kind {
                    FailureKind::Budget => over(),
                    FailureKind::Timeout => format!("exceeded the {own} ms call deadline"),
                    FailureKind::Fuel => format!("ran out of fuel ({:?} per call)", self.limits.fuel_per_call),
                    FailureKind::Memory => format!("hit the {} byte memory cap", self.limits.memory_bytes),
                    _ => e.root_cause().to_string(),
                };
                Err(fail(kind, message))
            }
        }
    }

    /// An invalid-answer error naming this plugin and `hook`.
    pub(crate) fn invalid(&self, hook: &'static str, message: String) -> PluginError {
        PluginError::Call { plugin: self.name.to_string(), hook, kind: FailureKind::Invalid, message }
    }

    /// Runs one hook call with `tensors` lent to the plugin as `borrow<tensor>` handles (no
    /// copy), which end with the call. A failed loan (the handle cap) poisons the instance, so
    /// handles lent before it do not matter: the instance is never called again.
    pub(crate) fn call_lending<R, const N: usize>(
        &mut self,
        hook: &'static str,
        tensors: [&Tensor; N],
        f: impl FnOnce(&mut Store<HostState>, &Guest, [Resource<PluginTensor>; N]) -> wasmtime::Result<Result<R, String>>,
    ) -> Result<R, PluginError> {
        let mut lent: [Option<Resource<PluginTensor>>; N] = std::array::from_fn(|_| None);
        for (slot, t) in lent.iter_mut().zip(tensors) {
            match self.state().push(t.shallow_clone()) {
                Ok(h) => *slot = Some(h),
                Err(e) => {
                    self.poison();
                    return Err(self.invalid(hook, e.to_string()));
                }
            }
        }
        let lent = lent.map(|h| h.expect("every tensor was lent"));

        let borrows = std::array::from_fn(|i| Resource::new_borrow(lent[i].rep()));
        let result = self.call(hook, |store, g| f(store, g, borrows));
        for h in lent {
            drop(self.reclaim(hook, h)?);
        }
        result
    }

    /// Takes back a tensor the plugin returned.
    pub(crate) fn reclaim(&mut self, hook: &'static str, r: Resource<PluginTensor>) -> Result<Tensor, PluginError> {
        self.state().take(r).map_err(|e| self.invalid(hook, e.to_string()))
    }

    /// The plugin's events since the last drain, as stream events of `request_id`.
    pub(crate) fn drain_stream_events(&mut self, request_id: &str) -> Vec<fastvideo_request::OmniEvent> {
        self.state()
            .drain_events()
            .into_iter()
            .map(|e| fastvideo_request::OmniEvent::Plugin {
                request_id: request_id.to_string(),
                plugin: e.plugin,
                name: e.name,
                payload: serde_json::from_str(&e.payload_json).unwrap_or(serde_json::Value::String(e.payload_json)),
            })
            .collect()
    }

    /// Marks the instance unusable (e.g. it returned a tensor of the wrong shape).
    pub(crate) fn poison(&mut self) {
        self.poisoned = true;
    }
}
