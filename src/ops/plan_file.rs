//! A saved plan (`apply --dry-run --out FILE`), applied later by `apply --plan FILE`: the spec as
//! it was read, and per vhost the fingerprint of what the plan was made against and the changes
//! it makes. The changes are not carried out from the file: `apply --plan` plans the saved spec
//! again and goes on only if the fingerprint and the changes are the same, so a hand-edited
//! file can never make hopper do what it would not plan itself.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::apply::{Expected, ReadFrom, Report};
use crate::output::SCHEMA_VERSION;
use crate::plan::fingerprint::Fingerprint;

/// What a plan file says it is, so that another JSON file is not taken for one.
pub const KIND: &str = "hopper-plan";

/// The largest plan file hopper reads (the spec's own limit, with room for the changes).
const MAX_PLAN_BYTES: u64 = 256 << 20;

#[derive(Debug, Serialize, Deserialize)]
pub struct PlanFile {
    pub schema_version: u32,
    pub kind: String,
    /// The hopper that made it, for people.
    pub hopper_version: String,
    /// The cluster it was made against, as it names itself.
    pub cluster_name: String,
    pub prune: bool,
    /// `--migrate` as given: the plan's migrations are carried out with it.
    #[serde(default)]
    pub migrate: bool,
    /// `--consumers-upgraded` as given.
    #[serde(default)]
    pub consumers_upgraded: bool,
    /// `--vhost` as given when the plan was made.
    pub vhost_override: Option<String>,
    /// Every spec file, as read.
    pub spec: Vec<SpecFile>,
    /// SHA-256 of `spec` as written, so that a spec edited in the file is told from a spec that
    /// compiles otherwise in another hopper. Absent from plans of hoppers that did not write it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_digest: Option<String>,
    pub vhosts: Vec<PlannedVhost>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct SpecFile {
    pub path: PathBuf,
    pub text: String,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct PlannedVhost {
    pub vhost: String,
    pub broker_version: String,
    pub read_from: ReadFrom,
    pub fingerprint: Fingerprint,
    /// The steps that change the broker, in order, as `apply --format json` shows them.
    pub changes: Vec<Value>,
    /// Every object of the vhost as read, with its digest, so that a refusal can name what
    /// moved. Absent from plans of hoppers that did not keep them (their refusals name nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objects: Option<Vec<crate::plan::fingerprint::SeenObject>>,
}

/// The flags of `apply` that change what it plans, kept with the plan.
#[derive(Debug, Clone, Copy)]
pub struct Flags {
    pub prune: bool,
    pub migrate: bool,
    pub consumers_upgraded: bool,
}

impl PlanFile {
    /// The plan of a dry run, with the spec files it was made from.
    pub fn new(report: &Report, spec: Vec<(PathBuf, String)>, flags: Flags, vhost_override: Option<String>) -> Self {
        let Flags { prune, migrate, consumers_upgraded } = flags;
        PlanFile {
            schema_version: SCHEMA_VERSION,
            kind: KIND.to_string(),
            hopper_version: crate::VERSION.to_string(),
            cluster_name: report.cluster_name.clone(),
            prune,
            migrate,
            consumers_upgraded,
            vhost_override,
            spec_digest: Some(digest(&spec)),
            spec: spec.into_iter().map(|(path, text)| SpecFile { path, text }).collect(),
            vhosts: report
                .vhosts
                .iter()
                .map(|v| PlannedVhost {
                    vhost: v.vhost.clone(),
                    broker_version: v.broker_version.clone(),
                    read_from: v.read_from,
                    fingerprint: v.fingerprint.clone().expect("apply --out asks for the fingerprint"),
                    changes: v.changes(),
                    objects: v.objects.clone(),
                })
                .collect(),
        }
    }

    /// Whether the spec files are as hopper wrote them (true for a plan without a digest).
    pub fn spec_is_as_written(&self) -> bool {
        let files: Vec<(PathBuf, String)> = self.spec.iter().map(|f| (f.path.clone(), f.text.clone())).collect();
        self.spec_digest.as_ref().is_none_or(|d| *d == digest(&files))
    }

    /// What `apply --plan` must find again before it changes anything.
    pub fn expected(&self) -> Vec<Expected> {
        self.vhosts
            .iter()
            .map(|v| Expected {
                vhost: v.vhost.clone(),
                fingerprint: v.fingerprint.clone(),
                changes: v.changes.clone(),
                objects: v.objects.clone(),
            })
            .collect()
    }

    /// Writes the file whole or not at all: a plan cut short must not be found there later.
    pub fn write(&self, path: &Path) -> anyhow::Result<()> {
        use anyhow::Context;
        let mut text = serde_json::to_vec_pretty(self)?;
        text.push(b'\n');
        crate::output::write_whole(path, &text).with_context(|| format!("cannot write the plan to {}", path.display()))
    }

    /// Reads a plan file; the error says what is wrong with it, in one sentence.
    pub fn read(path: &Path) -> Result<PlanFile, String> {
        use std::io::Read;
        let shown = path.display();
        let file = std::fs::File::open(path).map_err(|e| format!("cannot read the plan file {shown}: {e}"))?;
        let mut bytes = Vec::new();
        file.take(MAX_PLAN_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("cannot read the plan file {shown}: {e}"))?;
        if bytes.len() as u64 > MAX_PLAN_BYTES {
            return Err(format!("{shown} is larger than {} MiB: not a plan hopper wrote", MAX_PLAN_BYTES >> 20));
        }
        let made = "make one with `hopper apply --dry-run --out FILE SPEC...`";
        let value: Value = serde_json::from_slice(&bytes)
            .map_err(|e| format!("{shown} is not a hopper plan file: it is not JSON ({e}); {made}"))?;
        if value.get("kind").and_then(Value::as_str) != Some(KIND) {
            return Err(format!("{shown} is not a hopper plan file (no \"kind\": \"{KIND}\"); {made}"));
        }
        match value.get("schema_version").and_then(Value::as_u64) {
            Some(v) if v == u64::from(SCHEMA_VERSION) => {}
            Some(v) => {
                return Err(format!(
                    "{shown} is a plan of schema version {v}, and this hopper ({}) reads schema version {SCHEMA_VERSION}: make the plan again with this hopper",
                    crate::VERSION
                ));
            }
            None => {
                return Err(format!("{shown} is a malformed plan file: `schema_version` is missing or not a number"));
            }
        }
        serde_json::from_value(value).map_err(|e| format!("{shown} is a malformed plan file: {e}; {made}"))
    }
}

/// SHA-256 over each file's path and text, each length-prefixed so that no two lists of files
/// give the same bytes.
fn digest(files: &[(PathBuf, String)]) -> String {
    let mut hasher = ring::digest::Context::new(&ring::digest::SHA256);
    for (path, text) in files {
        let path = path.to_string_lossy();
        for part in [path.as_bytes(), text.as_bytes()] {
            hasher.update(&(part.len() as u64).to_le_bytes());
            hasher.update(part);
        }
    }
    let hex: String = hasher.finish().as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}
