//! The API's errors: a status and `{"error": {"code", "message"}}`.

use crate::driver::DriverError;
use crate::store::StoreError;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// An error answered to a client.
#[derive(Debug)]
pub struct ApiError {
    /// The HTTP status of the response.
    pub status: StatusCode,
    /// A stable word clients match on.
    pub code: &'static str,
    /// What went wrong, for a person to read.
    pub message: String,
}

impl ApiError {
    /// An error answered with `status`, `code` and `message`.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    /// A 400 for a request the API cannot act on as sent.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    /// A 404 for a run, approval or route that does not exist.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// A 409 for a request the run's current state refuses.
    pub fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, "conflict", message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": { "code": self.code, "message": self.message } });
        (
            self.status,
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            body.to_string(),
        )
            .into_response()
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        use StoreError as E;
        let message = e.to_string();
        match e {
            E::RunNotFound(_) | E::ApprovalNotFound(_) => ApiError::not_found(message),
            E::Refused(_) | E::Terminal { .. } | E::Conflict { .. } | E::Leased { .. } => {
                ApiError::conflict(message)
            }
            E::ReadOnly | E::NotPermitted(_) => {
                ApiError::new(StatusCode::FORBIDDEN, "store_read_only", message)
            }
            E::Unavailable { .. } | E::Locked { .. } | E::DiskFull => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                message,
            ),
            _ => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message),
        }
    }
}

impl From<DriverError> for ApiError {
    fn from(e: DriverError) -> ApiError {
        match e {
            DriverError::Store(e) => e.into(),
            DriverError::Invalid(m) => ApiError::bad_request(m),
            e => ApiError::conflict(e.to_string()),
        }
    }
}
