//! The on-disk compile cache: a compiled component is stored under the
//! sha256 of its bytes and the engine's compatibility hash, with a checksum
//! of its own. A corrupt, truncated or foreign entry is detected, recompiled
//! and replaced; it is never handed to wasmtime unchecked.

use sha2::{Digest, Sha256};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use wasmtime::component::Component;
use wasmtime::Engine;

const MAGIC: &[u8; 8] = b"KEELCC02";
/// MAGIC, the component's sha256, the engine key (16 bytes of hex), the
/// payload's sha256.
const HEADER: usize = 8 + 32 + 16 + 32;

/// Where a component came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Loaded from a valid cache entry.
    Hit,
    /// Compiled, and stored if a cache directory is set.
    Compiled,
    /// The entry was corrupt or foreign: recompiled and replaced.
    Replaced,
}

/// The engine's compatibility hash as hex: two engines whose compiled code
/// is interchangeable have the same one.
pub fn engine_key(engine: &Engine) -> String {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut h);
    // Also key on this crate's version: the host's bindings shape the code.
    env!("CARGO_PKG_VERSION").hash(&mut h);
    format!("{:016x}", h.finish())
}

/// The file in `dir` that caches the component whose sha256 is `sha256_hex`, compiled by `engine`.
pub fn entry_path(dir: &Path, sha256_hex: &str, engine: &Engine) -> PathBuf {
    dir.join(format!("{sha256_hex}-{}.cwasm", engine_key(engine)))
}

/// Loads the compiled form of `bytes` (whose sha256 is `sha`) from `dir`,
/// or compiles and stores it.
pub fn load_or_compile(
    engine: &Engine,
    dir: Option<&Path>,
    sha: &str,
    bytes: &[u8],
) -> anyhow::Result<(Component, CacheOutcome)> {
    let Some(dir) = dir else {
        return Ok((Component::new(engine, bytes)?, CacheOutcome::Compiled));
    };
    let path = entry_path(dir, sha, engine);
    let mut outcome = CacheOutcome::Compiled;
    if let Ok(data) = std::fs::read(&path) {
        match checked_payload(&data, sha, &engine_key(engine)) {
            Some(payload) => {
                // SAFETY: the payload was written by `store` below from
                // `Component::serialize` of this same engine configuration
                // (the file name carries the engine's compatibility hash),
                // and its sha256 checksum matched, so it is not corrupt.
                // wasmtime also re-checks its own header on deserialize.
                match unsafe { Component::deserialize(engine, payload) } {
                    Ok(c) => return Ok((c, CacheOutcome::Hit)),
                    Err(e) => tracing::warn!(
                        "compile cache entry {} rejected by wasmtime: {e}",
                        path.display()
                    ),
                }
            }
            None => tracing::warn!(
                "compile cache entry {} is corrupt, foreign or from another keel version; recompiling",
                path.display()
            ),
        }
        outcome = CacheOutcome::Replaced;
    }
    let component = Component::new(engine, bytes)?;
    if let Err(e) = store(dir, &path, sha, &engine_key(engine), &component) {
        tracing::warn!(
            "cannot write the compile cache entry {}: {e:#}",
            path.display()
        );
    }
    Ok((component, outcome))
}

/// The payload of an entry, if it is whole and belongs to this component
/// and this engine.
fn checked_payload<'a>(data: &'a [u8], sha: &str, engine: &str) -> Option<&'a [u8]> {
    if data.len() < HEADER || &data[..8] != MAGIC {
        return None;
    }
    let component = hex::decode(sha).ok()?;
    if data[8..40] != component[..] || &data[40..56] != engine.as_bytes() {
        return None;
    }
    let (sum, payload) = data[56..].split_at(32);
    (Sha256::digest(payload).as_slice() == sum).then_some(payload)
}

fn store(
    dir: &Path,
    path: &Path,
    sha: &str,
    engine: &str,
    component: &Component,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    let payload = component.serialize()?;
    let mut data = Vec::with_capacity(HEADER + payload.len());
    data.extend_from_slice(MAGIC);
    data.extend_from_slice(&hex::decode(sha)?);
    data.extend_from_slice(engine.as_bytes());
    data.extend_from_slice(&Sha256::digest(&payload));
    data.extend_from_slice(&payload);
    // Write aside and rename, so a reader never sees half an entry.
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, &data)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

/// The sha256 of `bytes` as hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}
