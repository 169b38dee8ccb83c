//! One delivery attempt and the retry schedule. [`Webhooks`] holds what the operator configured
//! (allowlist, secret, schedule) and the HTTP agent; [`WebhookStatus`] is what a job's record
//! says of its delivery, so clients see it and a restart resumes it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use serde::{Deserialize, Serialize};

use super::policy::{sign, WebhookPolicy};
use crate::job::VideoObject;

/// Where a job's delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryState {
    /// Not delivered yet: the job runs, or attempts failed and another is due.
    Pending,
    /// A receiver accepted the event (a 2xx).
    Delivered,
    /// Given up: the receiver answered 410 Gone, or the retry window ran out.
    Failed,
}

/// The `webhook` object of a job: where the event goes and how its delivery went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WebhookStatus {
    /// The receiver, as the request gave it.
    pub url: String,
    /// Where the delivery stands.
    pub status: DeliveryState,
    /// Attempts made so far.
    pub attempts: u32,
    /// The last failed attempt's reason (status code or connection error).
    pub last_error: Option<String>,
    /// Unix seconds of the next attempt while retrying.
    pub next_attempt_at: Option<u64>,
    /// Unix seconds of the accepted attempt.
    pub delivered_at: Option<u64>,
}

impl WebhookStatus {
    /// A delivery to `url` not tried yet.
    pub fn pending(url: String) -> Self {
        Self {
            url,
            status: DeliveryState::Pending,
            attempts: 0,
            last_error: None,
            next_attempt_at: None,
            delivered_at: None,
        }
    }
}

/// When attempts after a failure come: `first`, doubling up to `max`, until `window` after the
/// job ended (Standard Webhooks suggests retrying for about a day).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetrySchedule {
    /// The wait after the first failed attempt.
    pub first: Duration,
    /// The longest wait between attempts.
    pub max: Duration,
    /// How long after the job ended attempts go on.
    pub window: Duration,
}

impl Default for RetrySchedule {
    fn default() -> Self {
        Self { first: Duration::from_secs(1), max: Duration::from_secs(600), window: Duration::from_secs(24 * 3600) }
    }
}

impl RetrySchedule {
    /// The wait after the `attempts`-th failed attempt (1-based).
    pub fn backoff(&self, attempts: u32) -> Duration {
        let doubled = self.first.saturating_mul(1u32 << attempts.saturating_sub(1).min(20));
        doubled.min(self.max)
    }
}

/// Deliveries by outcome, for `/metrics`.
#[derive(Clone, Default)]
pub struct WebhookMetrics {
    /// Events a receiver accepted (2xx).
    pub delivered: Counter,
    /// Attempts that failed and will be retried.
    pub retried: Counter,
    /// Events abandoned: 410 Gone, or the retry window ran out.
    pub given_up: Counter,
}

impl WebhookMetrics {
    /// The counters, registered under `fastvideo_webhook_*`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        let r = registry.sub_registry_with_prefix("fastvideo_webhook");
        r.register("delivered", "Webhook events a receiver accepted (2xx)", m.delivered.clone());
        r.register("retried", "Webhook attempts that failed and are retried", m.retried.clone());
        r.register("given_up", "Webhook events abandoned (410 Gone or the retry window ran out)", m.given_up.clone());
        m
    }
}

/// How one attempt ended.
#[derive(Debug, PartialEq)]
pub enum Attempt {
    /// The receiver accepted it (a 2xx).
    Delivered,
    /// Failed; try again later.
    Retry(String),
    /// The receiver said 410 Gone: do not try again.
    Gone,
    /// Not sent: the job was deleted.
    Cancelled,
}

/// The operator's webhook setup and the agent deliveries go out on.
pub struct Webhooks {
    /// Which URLs jobs may name (the operator's allowlist).
    pub policy: WebhookPolicy,
    secret: String,
    /// When failed attempts are retried.
    pub schedule: RetrySchedule,
    agent: ureq::Agent,
    /// Deliveries by outcome.
    pub metrics: WebhookMetrics,
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

impl Webhooks {
    /// `secret` is the `whsec_…` key every delivery is signed with (checked here, so a bad one
    /// stops the server at start rather than every delivery).
    pub fn new(
        policy: WebhookPolicy,
        secret: &str,
        schedule: RetrySchedule,
        metrics: WebhookMetrics,
    ) -> Result<Self, String> {
        let secret = secret.trim().to_string();
        sign(&secret, "check", 0, b"")?;
        // No redirects: a receiver on the allowlist must not bounce a delivery elsewhere.
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(10)))
            .max_redirects(0)
            .http_status_as_error(false)
            .user_agent(concat!("fastvideo-webhooks/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        Ok(Self { policy, secret, schedule, agent, metrics })
    }

    /// The event a job's end sends, as OpenAI's video webhooks shape it: `video.completed` or
    /// `video.failed`, the job (without its own `webhook` object) as `data`. Its id is fixed per
    /// job, so a receiver can drop a retried duplicate.
    pub fn event(video: &VideoObject) -> (String, Vec<u8>) {
        let id = format!("evt_{}", &blake3::hash(video.id.as_bytes()).to_hex()[..24]);
        let kind = if video.status == crate::job::Status::Completed { "video.completed" } else { "video.failed" };
        let mut data = video.clone();
        data.webhook = None;
        let body = serde_json::json!({
            "object": "event",
            "id": id,
            "type": kind,
            "created_at": video.completed_at.unwrap_or_else(unix_now),
            "data": data,
        });
        (id, serde_json::to_vec(&body).unwrap_or_default())
    }

    /// One signed POST, unless `wanted` says the event is no longer (its job was deleted),
    /// asked right before sending; blocking (run it off the async threads).
    pub fn attempt(&self, url: &str, id: &str, body: &[u8], wanted: &dyn Fn() -> bool) -> Attempt {
        // Checked again: the allowlist may have shrunk since the job was stored.
        if let Err(e) = self.policy.check(url) {
            return Attempt::Retry(e);
        }
        if !wanted() {
            return Attempt::Cancelled;
        }
        let ts = unix_now();
        let signature = match sign(&self.secret, id, ts, body) {
            Ok(s) => s,
            Err(e) => return Attempt::Retry(e),
        };
        let sent = self
            .agent
            .post(url)
            .header("content-type", "application/json")
            .header("webhook-id", id)
            .header("webhook-timestamp", ts.to_string())
            .header("webhook-signature", signature)
            .send(body);
        match sent {
            Ok(r) if r.status().is_success() => Attempt::Delivered,
            Ok(r) if r.status().as_u16() == 410 => Attempt::Gone,
            Ok(r) => Attempt::Retry(format!("HTTP {}", r.status())),
            Err(e) => Attempt::Retry(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let s = RetrySchedule { first: Duration::from_secs(1), max: Duration::from_secs(10), window: Duration::ZERO };
        let waits: Vec<u64> = (1..=6).map(|n| s.backoff(n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 10, 10]);
        assert_eq!(s.backoff(400), Duration::from_secs(10), "no overflow");
    }

    #[test]
    fn the_event_names_the_outcome_and_keeps_its_id_across_attempts() {
        let mut v = crate::job::tests::video("video_a");
        v.status = crate::job::Status::Completed;
        v.webhook = Some(WebhookStatus::pending("https://h.example/x".into()));
        let (id, body) = Webhooks::event(&v);
        let e: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!((e["type"].as_str(), e["data"]["id"].as_str()), (Some("video.completed"), Some("video_a")));
        assert!(e["data"].get("webhook").is_none(), "{e}");
        assert_eq!(Webhooks::event(&v).0, id);
        v.status = crate::job::Status::Failed;
        let e: serde_json::Value = serde_json::from_slice(&Webhooks::event(&v).1).unwrap();
        assert_eq!(e["type"], "video.failed");
        assert!(
            Webhooks::new(WebhookPolicy::default(), "whsec_!!", RetrySchedule::default(), Default::default()).is_err()
        );
    }
}
