//! A request body the framework could not read, as the API's error: past the body limit it is
//! the documented 413 (`payload_too_large`) whichever route and wire form (JSON, multipart) hit
//! the limit, else a 400 naming the field. One mapping, so no route answers a 400 for size.

use axum::extract::multipart::{MultipartError, MultipartRejection};
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;

use crate::error::ApiError;

/// A framework rejection of a body: its status (413 past the limit) and its text.
pub trait BodyFailure {
    fn status(&self) -> StatusCode;
    fn text(&self) -> String;
}

macro_rules! body_failure {
    ($($t:ty),*) => {$(
        impl BodyFailure for $t {
            fn status(&self) -> StatusCode {
                <$t>::status(self)
            }
            fn text(&self) -> String {
                self.body_text()
            }
        }
    )*};
}

body_failure!(BytesRejection, MultipartRejection, MultipartError);

/// The size limit of request bodies, carried to the handlers that read bodies themselves so a
/// 413 can say it.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimit(pub usize);

/// The error for a body (or a form field, `param`) that could not be read; `limit` is the
/// request's [`BodyLimit`] when known.
pub fn unreadable(param: &str, e: &impl BodyFailure, limit: Option<BodyLimit>) -> ApiError {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        return too_large(limit);
    }
    ApiError::field(param, format!("{param}: unreadable body: {}", e.text()))
}

/// The 413 of a body over the limit (the framework's own text says only "length limit
/// exceeded").
pub fn too_large(limit: Option<BodyLimit>) -> ApiError {
    let limit = match limit {
        Some(BodyLimit(n)) if n % (1 << 20) == 0 => format!(" of {} MiB", n >> 20),
        Some(BodyLimit(n)) => format!(" of {n} bytes"),
        None => String::new(),
    };
    ApiError::Rejected {
        status: StatusCode::PAYLOAD_TOO_LARGE,
        message: format!("the request body is over this server's size limit{limit}"),
    }
}
