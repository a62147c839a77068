//! API errors as JSON ([`ErrorBody`]): input problems name the problem; 5xx causes are logged,
//! never sent. [`Q`] is `Query` whose rejections answer in the same JSON shape.

use axum::extract::{FromRequestParts, Query};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use memlens_api::{ErrorBody, Status};

#[derive(Debug)]
pub enum ApiError {
    NotFound,
    /// No job has this id.
    NoSuchJob,
    Gone,
    Forbidden,
    /// An upload without a token in force.
    Unauthorized,
    /// Too many uploads from this client; retry after this many seconds.
    TooMany(u64),
    /// The client already has this many uploads in progress.
    TooManyAtOnce(usize),
    /// The upload's body sent nothing for this many seconds.
    BodyTimeout(u64),
    TooLarge(u64),
    BadRequest(String),
    /// Processing has not finished; carries the status.
    NotReady(Box<Status>),
    /// Processing failed; carries the status with its error.
    Failed(Box<Status>),
    /// The store's disk is full: nothing of the request was kept.
    StorageFull,
    /// Logged; the client sees only "internal error".
    Internal(String),
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (code, error, status) = match self {
            ApiError::NotFound => (
                StatusCode::NOT_FOUND,
                "no such report (it may have been deleted)".to_owned(),
                None,
            ),
            ApiError::NoSuchJob => (StatusCode::NOT_FOUND, "no such job".to_owned(), None),
            ApiError::Gone => (StatusCode::GONE, "this report has expired".to_owned(), None),
            ApiError::Forbidden => (StatusCode::FORBIDDEN, "wrong or missing owner token".to_owned(), None),
            ApiError::Unauthorized => {
                let body = Json(ErrorBody {
                    error: "this server needs an upload token (Authorization: Bearer TOKEN)".to_owned(),
                    status: None,
                });
                return (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, "Bearer")], body).into_response();
            }
            ApiError::TooMany(wait) => {
                return too_many(format!("too many uploads from this client; retry in {wait} s"), wait);
            }
            ApiError::TooManyAtOnce(n) => {
                return too_many(
                    format!("this client already has {n} uploads in progress; retry when one has finished"),
                    1,
                );
            }
            ApiError::BodyTimeout(secs) => (
                StatusCode::REQUEST_TIMEOUT,
                format!("the upload stalled: no bytes arrived for {secs} s, so it was dropped; send it again"),
                None,
            ),
            ApiError::TooLarge(limit) => (
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("upload exceeds the limit of {limit} bytes"),
                None,
            ),
            ApiError::BadRequest(m) => (StatusCode::BAD_REQUEST, m, None),
            ApiError::NotReady(s) => (
                StatusCode::ACCEPTED,
                "the report is still being processed".to_owned(),
                Some(s),
            ),
            ApiError::Failed(s) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                s.error.clone().unwrap_or_else(|| "processing failed".into()),
                Some(s),
            ),
            ApiError::StorageFull => (
                StatusCode::INSUFFICIENT_STORAGE,
                "the server's disk is full: this upload was not stored (stored reports are unaffected); \
                 retry when space has been freed"
                    .to_owned(),
                None,
            ),
            ApiError::Internal(cause) => {
                tracing::error!("internal error: {cause}");
                (StatusCode::INTERNAL_SERVER_ERROR, "internal error".to_owned(), None)
            }
        };
        (
            code,
            Json(ErrorBody {
                error,
                status: status.map(|s| *s),
            }),
        )
            .into_response()
    }
}

/// An internal error from anything printable (logged, never sent).
pub fn internal<E: std::fmt::Display>(e: E) -> ApiError {
    ApiError::Internal(e.to_string())
}

/// A store error: 507 when the disk is full, else internal.
pub fn store_error(e: crate::storage::store::StoreError) -> ApiError {
    if e.is_disk_full() {
        ApiError::StorageFull
    } else {
        internal(e)
    }
}

/// Query parameters (types from `memlens-api`); a malformed query is a JSON 400.
pub struct Q<T>(pub T);

impl<T, S> FromRequestParts<S> for Q<T>
where
    T: serde::de::DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(q)| Q(q))
            .map_err(|e| ApiError::BadRequest(e.body_text()))
    }
}

/// 429 with `Retry-After: wait`.
fn too_many(error: String, wait: u64) -> Response {
    let body = Json(ErrorBody { error, status: None });
    (
        StatusCode::TOO_MANY_REQUESTS,
        [(header::RETRY_AFTER, wait.to_string())],
        body,
    )
        .into_response()
}
