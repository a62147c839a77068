//! `memlens-bundle [--release]`: builds the web UI into `dist/`, as a bundler would, with only
//! cargo and wasm-bindgen's own library (`wasm-bindgen-cli-support`, the version of the
//! `wasm-bindgen` the frontend links: the workspace pins both):
//! 1. `memlens-frontend` for `wasm32-unknown-unknown` (`--release`: the `wasm-release`
//!    profile, optimised for size; else the dev profile);
//! 2. wasm-bindgen's web target writes the JS glue, both named by the wasm's content hash;
//! 3. `frontend/style.css` is copied under its content hash;
//! 4. `frontend/index.html`'s marker line becomes the module script that starts the app, the
//!    stylesheet and the preloads, each with its subresource integrity (sha384); the
//!    `data-trunk` lines `trunk serve` builds from (Trunk.toml, the edit-reload loop) go;
//! 5. every script, wasm and stylesheet is written gzipped beside itself (`.gz`), which the
//!    server hands to browsers that accept gzip.
//!
//! The new `dist/` replaces the old one whole. Hand-written because the one bundler that fits
//! (trunk) is a six-minute compile on a small machine before a newcomer's first page, for these
//! few steps; and the library rather than the wasm-bindgen CLI, which is a separate install of
//! its own (with an HTTP server and a TLS stack for its test runner) that cargo cannot share
//! with this build.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use base64::Engine;
use sha2::{Digest, Sha256, Sha384};

/// The frontend's package and binary name; its files are named after it.
const APP: &str = "memlens-frontend";

/// The start of the line of `frontend/index.html` the bundle's tags replace.
const MARKER: &str = "<!-- memlens-bundle:";

fn main() -> ExitCode {
    let release = std::env::args().skip(1).any(|a| a == "--release");
    match bundle(release) {
        Ok(dist) => {
            eprintln!("memlens-bundle: the web UI is in {}", dist.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("memlens-bundle: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The checkout: `cargo run` names this package's folder at run time (the compile-time one can
/// be another checkout's when several share a target directory).
fn root() -> PathBuf {
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    let root = manifest.join("../..");
    root.canonicalize().unwrap_or(root)
}

fn run(command: &mut Command) -> Result<(), String> {
    let status = command
        .status()
        .map_err(|e| format!("cannot run {:?}: {e}", command.get_program()))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{command:?} failed ({status})"))
    }
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), String> {
    std::fs::write(path, bytes).map_err(|e| format!("{}: {e}", path.display()))
}

/// The first 16 hex digits of the bytes' SHA-256: a file's name part.
fn content_hash(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A subresource-integrity value.
fn integrity(bytes: &[u8]) -> String {
    format!(
        "sha384-{}",
        base64::engine::general_purpose::STANDARD.encode(Sha384::digest(bytes))
    )
}

fn gzip_beside(path: &Path) -> Result<(), String> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(&read(path)?).map_err(|e| e.to_string())?;
    let bytes = gz.finish().map_err(|e| e.to_string())?;
    let mut name = path.as_os_str().to_owned();
    name.push(".gz");
    write(Path::new(&name), &bytes)
}

fn bundle(release: bool) -> Result<PathBuf, String> {
    let root = root();
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let profile = if release { "wasm-release" } else { "dev" };
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    run(Command::new(cargo).current_dir(&root).args([
        "build",
        "--locked",
        "--target",
        "wasm32-unknown-unknown",
        "--profile",
        profile,
        "-p",
        APP,
    ]))?;
    let out_dir = if release { "wasm-release" } else { "debug" };
    let wasm = target_dir
        .join("wasm32-unknown-unknown")
        .join(out_dir)
        .join(format!("{APP}.wasm"));
    let stage = root.join(format!("dist.staging-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&stage);
    std::fs::create_dir_all(&stage).map_err(|e| format!("{}: {e}", stage.display()))?;
    let result = fill(&root, &wasm, &stage);
    if let Err(e) = result {
        let _ = std::fs::remove_dir_all(&stage);
        return Err(e);
    }
    let dist = root.join("dist");
    let _ = std::fs::remove_dir_all(&dist);
    std::fs::rename(&stage, &dist).map_err(|e| format!("{}: {e}", dist.display()))?;
    Ok(dist)
}

/// Writes the bundle into `stage`.
fn fill(root: &Path, wasm: &Path, stage: &Path) -> Result<(), String> {
    let name = format!("{APP}-{}", content_hash(&read(wasm)?));
    wasm_bindgen_cli_support::Bindgen::new()
        .input_path(wasm)
        .web(true)
        .and_then(|b| b.typescript(false).out_name(&name).generate(stage))
        .map_err(|e| format!("wasm-bindgen on {}: {e:#}", wasm.display()))?;
    let (js, bg) = (format!("{name}.js"), format!("{name}_bg.wasm"));
    let css_bytes = read(&root.join("frontend/style.css"))?;
    let css = format!("style-{}.css", content_hash(&css_bytes));
    write(&stage.join(&css), &css_bytes)?;
    let sri = |file: &str| read(&stage.join(file)).map(|b| integrity(&b));
    let head = format!(
        r#"<script type="module">
import init, * as bindings from '/{js}';
const wasm = await init({{ module_or_path: '/{bg}' }});
window.wasmBindings = bindings;
</script>
    <link rel="stylesheet" href="/{css}" integrity="{css_sri}"/>
    <link rel="modulepreload" href="/{js}" crossorigin="anonymous" integrity="{js_sri}"><link rel="preload" href="/{bg}" crossorigin="anonymous" integrity="{bg_sri}" as="fetch" type="application/wasm">"#,
        css_sri = sri(&css)?,
        js_sri = sri(&js)?,
        bg_sri = sri(&bg)?,
    );
    let template = String::from_utf8(read(&root.join("frontend/index.html"))?).map_err(|e| e.to_string())?;
    // The template's marker, a comment line, becomes what this made.
    let Some(marker) = template.lines().find(|l| l.trim_start().starts_with(MARKER)) else {
        return Err(format!("frontend/index.html has no `{MARKER} …-->` line"));
    };
    let page = template.replacen(marker, &format!("    {head}"), 1);
    // What `trunk serve` (Trunk.toml, the edit-reload loop) builds from: the same app and
    // stylesheet this bundled, so their lines go.
    let page: String = page
        .lines()
        .filter(|l| !l.contains("data-trunk") && !l.contains("trunk serve (Trunk.toml)"))
        .map(|l| format!("{l}\n"))
        .collect();
    write(&stage.join("index.html"), page.as_bytes())?;
    for file in [&js, &bg, &css] {
        gzip_beside(&stage.join(file))?;
    }
    Ok(())
}
