//! Completion webhooks: a request's `webhook` URL is told when its job ends, with the job as an
//! OpenAI-style event, signed per Standard Webhooks and retried with backoff until the receiver
//! answers 2xx. The allowlist and signature are in `policy`; one delivery attempt and the retry
//! schedule in `delivery`; the retry loop itself runs on the job registry (`jobs::webhook`), which
//! keeps the delivery's state on the job record so a restart resumes it.

mod delivery;
mod policy;

pub use delivery::{Attempt, DeliveryState, RetrySchedule, WebhookMetrics, WebhookStatus, Webhooks};
pub use policy::{sign, Refusal, WebhookPolicy};
