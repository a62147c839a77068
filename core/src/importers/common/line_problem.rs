//! What is wrong with one line (or one JSON item) of a text log: the closed set the logs' line
//! parsers return. The importer reports it with the line's number
//! ([`line_error`](super::lines::line_error)), or notes it and goes on when the line is the
//! log's last one, cut off mid-write.

/// One line's problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LineProblem {
    #[error("{got} fields, but the header has {expected}")]
    FieldCount { got: usize, expected: usize },
    #[error("{got} columns, but the header has {expected}")]
    ColumnCount { got: usize, expected: usize },
    #[error("{got} columns, no `{name}` (column {column} of the header)")]
    MissingColumn { got: usize, name: String, column: usize },
    /// A field's text that does not read as what its column holds.
    #[error("unreadable {field} `{text}`")]
    Unreadable { field: Field, text: String },
    /// A JSON value that does not read as what its key holds.
    #[error("unreadable {field} {value}")]
    UnreadableValue { field: Field, value: String },
    #[error("unknown memory unit `{unit}` in `{text}`")]
    MemoryUnit { unit: String, text: String },
    #[error("no timestamp (expected a `timestamp` key)")]
    NoTimestamp,
    #[error("no memory values (expected `memory_used` / `memory_total`)")]
    NoMemoryValues,
    #[error("a memory event without `{0}`")]
    EventWithout(&'static str),
    /// The JSON parser's message.
    #[error("not JSON: {0}")]
    NotJson(String),
    #[error("not a JSON object")]
    NotAnObject,
}

/// Which field of a line could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    Timestamp,
    DateAndTime,
    GpuIndex,
    Pid,
}

impl std::fmt::Display for Field {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Field::Timestamp => "timestamp",
            Field::DateAndTime => "date and time",
            Field::GpuIndex => "GPU index",
            Field::Pid => "pid",
        })
    }
}

impl LineProblem {
    pub fn not_json(e: serde_json::Error) -> LineProblem {
        LineProblem::NotJson(e.to_string())
    }
    pub fn unreadable(field: Field, text: impl Into<String>) -> LineProblem {
        LineProblem::Unreadable {
            field,
            text: text.into(),
        }
    }
}
