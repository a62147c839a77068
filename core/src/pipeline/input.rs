//! The pipeline's inputs ([`Input`]): a file on disk, an upload in a store, a recording's
//! windows, or an import begun elsewhere; how large each may be once decompressed, and the
//! import of the next one begun while the file before it is analysed.

use std::collections::VecDeque;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::error::ImportError;
use crate::importers::{begin_import, import_on_thread, BegunImport, ImportOptions, ImportedFile, OpenInput};
use crate::source::Source;

/// Waits for an input's import begun elsewhere (an upload imported while it arrived).
pub type PendingImport = Box<dyn FnOnce() -> Result<ImportedFile, ImportError> + Send>;

/// One input file: the name it is reported under, and how to read it.
pub struct Input {
    pub name: String,
    /// Its size in bytes (bounds decompression and length prefixes); `None`: ask the file system.
    size: Option<u64>,
    open: InputOpener,
}

enum InputOpener {
    Path(PathBuf),
    Reader(OpenInput),
    Begun(PendingImport),
    /// The windows of one recording, in order, each with its size.
    Windows(Vec<(u64, OpenInput)>),
}

impl Input {
    /// A file on disk, reported under its path as given.
    pub fn path(path: &Path) -> Input {
        Input {
            name: path.display().to_string(),
            size: None,
            open: InputOpener::Path(path.to_owned()),
        }
    }
    /// Content from a reader (an upload in a store), `size` bytes long.
    pub fn reader(name: impl Into<String>, size: u64, open: OpenInput) -> Input {
        Input {
            name: name.into(),
            size: Some(size),
            open: InputOpener::Reader(open),
        }
    }
    /// The windows of one process's recording, in the order they were taken (each an upload in
    /// a store, with its size): imported as the one snapshot they make together
    /// ([`crate::importers::import_windows`]).
    pub fn windows(name: impl Into<String>, windows: Vec<(u64, OpenInput)>) -> Input {
        Input {
            name: name.into(),
            size: None,
            open: InputOpener::Windows(windows),
        }
    }
    /// An input whose import was begun elsewhere ([`crate::importers::begin_import`]): the
    /// run waits for it where it would have imported the input.
    pub fn begun(name: impl Into<String>, import: PendingImport) -> Input {
        Input {
            name: name.into(),
            size: None,
            open: InputOpener::Begun(import),
        }
    }
}

/// Inputs of at most this many bytes once decompressed ([`expanded_size`]) are imported while
/// the file before them is analysed and stored: the importer is one thread and the analyses
/// leave a core idle part of the time, so a run of ranks' snapshots finishes sooner. A larger
/// one waits its turn, so that at most one large file's tables are held at a time.
const IMPORT_AHEAD_BYTES: u64 = 256 << 20;
/// How many times its size gzipped content is taken to hold once inflated (PyTorch snapshots
/// deflate about ten to one): what an upload that may be gzip counts
/// as here, and a gzipped upload in the server's memory reservation for an ingest.
pub const GZIP_RATIO: u64 = 10;

/// How many bytes an input may hold once decompressed, as far as can be told without reading
/// it: a plain file's size; a gzip file's own record of it (its last four bytes: the last
/// member's size modulo 4 GiB, never taken below the file's own); an upload's size times
/// [`GZIP_RATIO`], as it may be gzip.
fn expanded_size(input: &Input) -> Option<u64> {
    match &input.open {
        InputOpener::Path(path) => file_expanded_size(path).ok(),
        InputOpener::Reader(_) => input.size.map(|s| s.saturating_mul(GZIP_RATIO)),
        InputOpener::Begun(_) => None,
        InputOpener::Windows(w) => Some(w.iter().map(|(size, _)| size.saturating_mul(GZIP_RATIO)).sum()),
    }
}

fn file_expanded_size(path: &Path) -> std::io::Result<u64> {
    use std::io::{Seek, SeekFrom};
    let mut file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    let mut magic = [0u8; 2];
    // A gzip member is at least 18 bytes: header, trailer and an empty body.
    if len < 18 || file.read_exact(&mut magic).is_err() || magic != [0x1f, 0x8b] {
        return Ok(len);
    }
    file.seek(SeekFrom::End(-4))?;
    let mut recorded = [0u8; 4];
    file.read_exact(&mut recorded)?;
    Ok(u64::from(u32::from_le_bytes(recorded)).max(len))
}

/// An input on its way to being imported.
pub(super) enum Next {
    /// Imported in its turn.
    Waiting(Input),
    /// Imported while the file before it is analysed.
    Ahead {
        name: String,
        import: Result<BegunImport, ImportError>,
    },
}

/// Begins the import of the next input in `queue` when it is small enough to be held beside
/// the file being analysed ([`IMPORT_AHEAD_BYTES`]); it stays waiting otherwise (and an
/// import begun elsewhere goes on as it is).
pub(super) fn begin_next_import(queue: &mut VecDeque<Next>, options: ImportOptions) {
    let Some(Next::Waiting(input)) = queue.front() else {
        return;
    };
    if expanded_size(input).is_none_or(|s| s > IMPORT_AHEAD_BYTES) {
        return;
    }
    let Some(Next::Waiting(input)) = queue.pop_front() else {
        return;
    };
    let (open, size) = (input.open, input.size);
    // A thread that cannot be started fails the import in its turn, as importing it then would.
    let import = begin_import(move || open_source(open, size, options), options);
    queue.push_front(Next::Ahead {
        name: input.name,
        import,
    });
}

fn open_source(open: InputOpener, size: Option<u64>, options: ImportOptions) -> Result<Source, ImportError> {
    match open {
        InputOpener::Path(path) => Source::open(&path, options.source),
        InputOpener::Reader(open) => Source::from_reader(open()?, size.unwrap_or(u64::MAX), options.source),
        InputOpener::Begun(_) | InputOpener::Windows(_) => Err(ImportError::Internal(
            "an import begun elsewhere, or of windows, has no one source".into(),
        )),
    }
}

impl Next {
    /// The name its file is reported under.
    pub(super) fn name(&self) -> &str {
        match self {
            Next::Waiting(input) => &input.name,
            Next::Ahead { name, .. } => name,
        }
    }

    /// Its import, waited for: in its turn, or begun ahead (or elsewhere) and now finished.
    pub(super) fn import(self, options: ImportOptions) -> (String, Result<ImportedFile, ImportError>) {
        match self {
            Next::Waiting(input) => {
                let imported = match input.open {
                    InputOpener::Begun(import) => import(),
                    InputOpener::Windows(windows) => crate::importers::import_windows_on_thread(windows, options),
                    open => import_on_thread(move || open_source(open, input.size, options), options),
                };
                (input.name, imported)
            }
            Next::Ahead { name, import } => (name, import.and_then(BegunImport::wait)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    /// A plain file counts its size; a gzip file what its trailer records (not below its own
    /// size); an upload, which may be gzip, ten times its size.
    #[test]
    fn inputs_are_sized_by_what_they_hold_once_decompressed() {
        let content = vec![b'x'; 100_000];
        let plain = tempfile::NamedTempFile::new().expect("temp");
        std::fs::write(plain.path(), &content).expect("write");
        let gzip = tempfile::NamedTempFile::new().expect("temp");
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(&content).expect("gzip");
        std::fs::write(gzip.path(), enc.finish().expect("gzip")).expect("write");
        let short = tempfile::NamedTempFile::new().expect("temp");
        std::fs::write(short.path(), [0x1f, 0x8b, 8]).expect("write");
        assert_eq!(expanded_size(&Input::path(plain.path())), Some(100_000));
        assert_eq!(expanded_size(&Input::path(gzip.path())), Some(100_000));
        assert_eq!(expanded_size(&Input::path(short.path())), Some(3));
        assert_eq!(expanded_size(&Input::path(Path::new("/no/such/file"))), None);
        let upload = Input::reader(
            "up.pickle",
            1_000,
            Box::new(|| Ok(Box::new(std::io::empty()) as Box<dyn Read + Send>)),
        );
        assert_eq!(expanded_size(&upload), Some(10_000));
    }
}
