//! The application layer: what each capability does, once, under every transport (the command
//! line, the HTTP API, the MCP server). A request names its inputs as the user gave them and
//! resolves them here once — a path to the pipeline, a share link to the remote server — and
//! answers a typed value from `memlens-api`; the transports only parse and render.
//! [`analyze`] reads files as one report, [`plan`] plans a step before it runs, [`check`] holds a
//! run to limits, [`compare`] compares two files, [`whatif`] predicts a
//! scenario's peak, [`source`] resolves what a run is, [`reports`] reads the store's reports by id (with their caches), [`runs`] gathers a job's ranks' uploads into one report, [`error`] is what a request fails with.

pub mod analyze;
pub mod check;
pub mod compare;
pub mod error;
pub mod plan;
pub mod reports;
pub mod runs;
pub mod source;
pub mod whatif;
