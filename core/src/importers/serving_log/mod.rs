//! vLLM and SGLang server startup logs: the lines in which the engine sizes its memory, in every
//! wording of the versions in use ([`vllm`], [`sglang`]), the error that stopped it, and the
//! settings it ran with (its config line, its arguments, the command pasted beside the log,
//! [`command`]).
//!
//! A log is read line by line, from one rank ([`rank`]): clauses of each engine set the figures
//! of the startup being read ([`Fold`]). A new startup begins at an engine's opening line (its
//! config, its arguments, SGLang's `Load weight begin`), when the other engine's lines begin, or
//! when a figure printed once a startup is printed again (a log of several restarts). What a
//! startup did not print stays `None`: the analysis says what is missing rather than guess.
//!
//! Figures are per GPU as the engine prints them, GiB whatever the spelling ([`values`]). The
//! format sniffs on the engines' own phrases in the first bytes; the same reading runs on every
//! text (a training log that ends in a vLLM error, a paste of a few lines), with the OOM
//! messages, memory summaries and nvidia-smi screens beside it.

mod command;
mod rank;
mod sglang;
mod values;
mod vllm;

use memlens_api::ServingEngine;
use regex::Captures;

use crate::error::ImportError;
use crate::evidence::{ServingError, ServingErrorKind, ServingStages, ServingStartup};
use crate::importers::common::text_lines::TextLine;
use crate::importers::read_evidence;
use crate::importers::{ImportOptions, Importer, Parsed};
use crate::source::Source;
use rank::Rank;

pub struct ServingLogImporter;

pub static IMPORTER: ServingLogImporter = ServingLogImporter;

/// Phrases only a vLLM or SGLang server (or its command) prints, any one of which in the first
/// bytes claims the text.
const MARKERS: &[&str] = &[
    "Initializing an LLM engine",
    "Initializing a V1 LLM engine",
    "vLLM API server version",
    "Loading model weights took",
    "Model loading took",
    "Memory profiling results",
    "Memory profiling takes",
    "the current vLLM instance can use",
    "Available KV cache memory:",
    "GPU KV cache size:",
    "# GPU blocks:",
    "# CUDA blocks:",
    "# cuda blocks:",
    "tokens per request:",
    "stored in KV cache (",
    "To serve at least one request with the model",
    "No available memory for the cache blocks",
    "Graph capturing finished in",
    "Estimated CUDA graph memory",
    "GiB for CUDAGraph memory",
    "server_args=ServerArgs(",
    "Load weight begin. avail mem=",
    "Load weight end.",
    "KV Cache is allocated.",
    "max_total_num_tokens=",
    "sglang.launch_server",
    "vllm serve ",
    "vllm.entrypoints.",
];

impl Importer for ServingLogImporter {
    /// Text (not JSON) holding one of the engines' own phrases in its first bytes.
    fn sniff(&self, head: &[u8]) -> bool {
        use crate::importers::common::text_lines::{is_text, looks_like_json};
        if !is_text(head) || looks_like_json(head) {
            return false;
        }
        let text = String::from_utf8_lossy(head);
        MARKERS.iter().any(|m| text.contains(m))
    }

    fn import(&self, source: Source, _options: &ImportOptions) -> Result<Parsed, ImportError> {
        Ok(Parsed::Text(Box::new(read_evidence(source)?)))
    }
}

/// What a clause does with its match.
pub type Apply = fn(&Captures, &mut Fold);

/// One line shape of an engine and what its match sets.
pub struct Clause {
    pub pattern: regex::Regex,
    pub apply: Apply,
}

/// Every clause that matches `line`, in order.
pub fn read_with(clauses: &[Clause], line: &str, fold: &mut Fold) {
    for c in clauses {
        if let Some(caps) = c.pattern.captures(line) {
            (c.apply)(&caps, fold);
        }
    }
}

/// The startups read so far and the one being read.
#[derive(Default)]
pub struct Fold {
    /// 1-based line being read.
    line: usize,
    current: Option<ServingStartup>,
    /// Whether the current startup has printed its weights-loaded line.
    weights_loaded: bool,
    /// Whether the current startup began with an engine's opening line (kept without figures:
    /// an out-of-memory error may follow it).
    opened: bool,
    done: Vec<ServingStartup>,
}

/// A field of a startup, for the clauses to name.
pub type Field<T> = fn(&mut ServingStartup) -> &mut Option<T>;

impl Fold {
    fn push_current(&mut self) {
        if let Some(s) = self.current.take() {
            if s.has_figures() || self.opened {
                self.done.push(s);
            }
        }
        self.weights_loaded = false;
        self.opened = false;
    }

    /// The startup of `engine` being read (a new one where the other engine's was).
    pub fn at(&mut self, engine: ServingEngine) -> &mut ServingStartup {
        if self.current.as_ref().is_some_and(|s| s.engine != engine) {
            self.push_current();
        }
        let line = self.line;
        let s = self.current.get_or_insert_with(|| ServingStartup::new(engine, line));
        s.end_line = line;
        s
    }

    /// An engine's opening line: a new startup unless the current one has printed no figure.
    pub fn begin(&mut self, engine: ServingEngine) {
        if self.current.as_ref().is_some_and(ServingStartup::has_figures) {
            self.push_current();
        }
        self.at(engine);
        self.opened = true;
    }

    /// A figure printed once a startup: printed again, it opens the next startup.
    pub fn fact<T>(&mut self, engine: ServingEngine, field: Field<T>, value: Option<T>) {
        let Some(v) = value else { return };
        if self
            .current
            .as_mut()
            .is_some_and(|s| s.engine == engine && field(s).is_some())
        {
            self.push_current();
        }
        *field(self.at(engine)) = Some(v);
    }

    /// A figure or setting several lines print: the first stands.
    pub fn fill<T>(&mut self, engine: ServingEngine, field: Field<T>, value: Option<T>) {
        let Some(v) = value else { return };
        let f = field(self.at(engine));
        if f.is_none() {
            *f = Some(v);
        }
    }

    /// A figure a later line prints more exactly: the last stands.
    pub fn replace<T>(&mut self, engine: ServingEngine, field: Field<T>, value: Option<T>) {
        if let Some(v) = value {
            *field(self.at(engine)) = Some(v);
        }
    }

    /// The weights-loaded line (once a startup; more exact than the profile's rounding).
    pub fn weights_loaded(&mut self, engine: ServingEngine, bytes: Option<i64>) {
        if self.weights_loaded && self.current.as_ref().is_some_and(|s| s.engine == engine) {
            self.push_current();
        }
        self.replace(engine, |s| &mut s.weights, bytes);
        self.weights_loaded = true;
        self.stage(engine, |s| &mut s.weights_loaded);
    }

    /// Where a stage was reached (the first line that says so).
    pub fn stage(&mut self, engine: ServingEngine, field: fn(&mut ServingStages) -> &mut Option<usize>) {
        let line = self.line;
        let f = field(&mut self.at(engine).stages);
        if f.is_none() {
            *f = Some(line);
        }
    }

    /// The error that stopped the startup (the first printed).
    pub fn error(&mut self, engine: ServingEngine, kind: ServingErrorKind, message: &str) {
        let line = self.line;
        let s = self.at(engine);
        if s.error.is_none() {
            s.error = Some(ServingError {
                kind,
                line,
                message: message.trim().to_owned(),
            });
        }
    }

    /// The engine of the startup being read, if any.
    pub fn engine(&self) -> Option<ServingEngine> {
        self.current.as_ref().map(|s| s.engine)
    }

    fn finish(mut self) -> Vec<ServingStartup> {
        self.push_current();
        self.done
    }
}

/// A line ending in `\` (a command pasted over lines) joined with the lines that go on with it.
fn logical_lines(lines: &[TextLine]) -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = Vec::with_capacity(lines.len());
    let mut open = false;
    for l in lines {
        let text = l.text.trim_end();
        let (body, goes_on) = match text.strip_suffix('\\') {
            Some(b) => (b, true),
            None => (text, false),
        };
        match out.last_mut() {
            Some(last) if open => {
                last.1.push(' ');
                last.1.push_str(body.trim());
            }
            _ => out.push((l.number, body.to_owned())),
        }
        open = goes_on;
    }
    out
}

/// Whether a line holds a memory figure or an error of either engine.
fn has_figure(line: &str) -> bool {
    let mut scratch = Fold::default();
    vllm::read_line(line, &mut scratch);
    sglang::read_line(line, &mut scratch);
    scratch.current.as_ref().is_some_and(ServingStartup::has_figures)
}

/// The rank whose lines are read (the lead where it printed a figure, else the rank that
/// printed the most figure lines, the first on ties) and how many ranks printed figures.
fn choose_rank(lines: &[(usize, String)], ranks: &[Rank]) -> (Rank, usize) {
    let mut with_figures: Vec<(&Rank, usize)> = Vec::new();
    for ((_, text), rank) in lines.iter().zip(ranks) {
        if !has_figure(text) {
            continue;
        }
        match with_figures.iter_mut().find(|(r, _)| *r == rank) {
            Some((_, n)) => *n += 1,
            None => with_figures.push((rank, 1)),
        }
    }
    let most = with_figures.iter().map(|(_, n)| *n).max().unwrap_or(0);
    let chosen = if with_figures.iter().any(|(r, _)| **r == Rank::Lead) {
        Rank::Lead
    } else {
        with_figures
            .iter()
            .find(|(_, n)| *n == most)
            .map_or(Rank::Lead, |(r, _)| (*r).clone())
    };
    (chosen, with_figures.len().max(1))
}

/// Every startup of a vLLM or SGLang server the lines hold, in order.
pub fn find_serving_startups(lines: &[TextLine]) -> Vec<ServingStartup> {
    let logical = logical_lines(lines);
    let ranks: Vec<Rank> = logical.iter().map(|(_, t)| rank::rank_of(t)).collect();
    let (chosen, rank_count) = choose_rank(&logical, &ranks);
    let mut fold = Fold::default();
    let mut commands: Vec<ServingStartup> = Vec::new();
    for ((number, text), rank) in logical.iter().zip(&ranks) {
        if let Some(c) = command::read_command(text, *number) {
            commands.push(c);
            continue;
        }
        if *rank != chosen {
            continue;
        }
        fold.line = *number;
        vllm::read_line(text, &mut fold);
        sglang::read_line(text, &mut fold);
        insufficient_memory(text, &mut fold);
    }
    let mut out = fold.finish();
    for s in &mut out {
        s.ranks = rank_count;
        // The command nearest the startup, before it or else after.
        let before = commands.iter().rev().find(|c| c.engine == s.engine && c.line < s.line);
        if let Some(c) = before.or_else(|| commands.iter().find(|c| c.engine == s.engine)) {
            s.fill_settings_from(c);
        }
    }
    out
}

/// Other wordings of "the KV cache does not fit", in a startup already being read.
fn insufficient_memory(line: &str, fold: &mut Fold) {
    use std::sync::LazyLock;
    static INSUFFICIENT: LazyLock<regex::Regex> = LazyLock::new(|| {
        values::re(r"(?i)\b(?:insufficient (?:gpu )?memory|not enough (?:gpu )?(?:memory|kv cache))\b.*")
    });
    let Some(engine) = fold.engine() else { return };
    if let Some(m) = INSUFFICIENT.find(line) {
        let lower = line.to_ascii_lowercase();
        if lower.contains("kv cache") || lower.contains("cache block") || lower.contains("mem-fraction") {
            fold.error(
                engine,
                ServingErrorKind::NoKvCacheMemory { profiled_tokens: None },
                m.as_str(),
            );
        }
    }
}

#[cfg(test)]
mod tests;
