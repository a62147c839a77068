//! The application layer: what each capability does, once, under every transport (the command
//! line, the HTTP API, the MCP server). A request names its inputs as the user gave them and
//! resolves them here once — a path to the pipeline, a share link to the remote server — and
//! answers a typed value from `memlens-api`; the transports only parse and render.
//! [`check`] holds a run to limits, [`compare`] compares two files, [`source`] resolves what a
//! run is, [`error`] is what a request fails with.

pub mod check;
pub mod compare;
pub mod error;
pub mod source;
