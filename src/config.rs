//! Where a run's broker settings come from: flags, then `HOPPER_*` environment variables, then
//! the named context of the config file (`--context`), then defaults. Each resolved setting keeps
//! its origin, so `hopper config show` can say where it came from. Secrets stay in files or the
//! environment; the config file names a password file, never a password.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, bail};
use serde::Serialize;
use toml::de::{DeTable, DeValue};

use crate::broker::{self, Password, Settings, tls::Tls};
use crate::diagnostic::{Diagnostic, Sources, SpecError};

mod setting;

pub use setting::Setting;

pub const DEFAULT_AMQP_URL: &str = "amqp://localhost:5672";

/// Where a setting came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "from", rename_all = "snake_case")]
pub enum Origin {
    /// A command-line flag, such as `--username`.
    Flag {
        flag: &'static str,
    },
    Env {
        variable: &'static str,
    },
    /// A key of the context in the config file.
    Context {
        context: String,
        file: PathBuf,
    },
    /// The (first) AMQP URL's user information.
    Url,
    Default,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Flag { flag } => write!(f, "flag {flag}"),
            Origin::Env { variable } => write!(f, "env {variable}"),
            Origin::Context { context, file } => write!(f, "context {context} ({})", file.display()),
            Origin::Url => write!(f, "the AMQP URL"),
            Origin::Default => write!(f, "default"),
        }
    }
}

impl Origin {
    /// The flag or variable, as a message names it: "HOPPER_PASSWORD_FILE".
    fn name(&self) -> &'static str {
        match self {
            Origin::Flag { flag } => flag,
            Origin::Env { variable } => variable,
            Origin::Context { .. } => "the context",
            Origin::Url => "the AMQP URL",
            Origin::Default => "the default",
        }
    }
}

/// The origin of a setting given by its flag.
fn flag_of(setting: Setting) -> Origin {
    Origin::Flag { flag: setting.flag().unwrap_or("a flag") }
}

/// A value and where it came from.
#[derive(Debug, Clone, Serialize)]
pub struct Resolved<T> {
    pub value: T,
    #[serde(flatten)]
    pub origin: Origin,
}

/// The password: its value, and the file it was read from, if any (shown; the value never is).
#[derive(Debug, Clone)]
pub struct PasswordSetting {
    pub password: Password,
    pub file: Option<PathBuf>,
}

/// What the command line says, before the environment and the config file are consulted.
#[derive(Debug, Clone, Default)]
pub struct Flags {
    pub context: Option<String>,
    pub amqp_url: Option<String>,
    pub management_url: Option<String>,
    pub username: Option<String>,
    pub password_file: Option<PathBuf>,
    pub tls_ca_cert_file: Option<PathBuf>,
    pub tls_cert_file: Option<PathBuf>,
    pub tls_key_file: Option<PathBuf>,
    pub timeout: Option<Duration>,
}

/// Every broker setting of a run, resolved.
#[derive(Debug, Clone)]
pub struct Resolution {
    /// The context in use, and the config file it was read from.
    pub context: Option<Resolved<String>>,
    pub config_file: PathBuf,
    pub amqp_url: Resolved<String>,
    pub management_url: Option<Resolved<String>>,
    pub username: Resolved<String>,
    pub password: Resolved<PasswordSetting>,
    pub tls_ca_cert_file: Option<Resolved<PathBuf>>,
    pub tls_cert_file: Option<Resolved<PathBuf>>,
    pub tls_key_file: Option<Resolved<PathBuf>>,
    /// The vhost of commands that take one from the command line (`inspect`, `graph --live`).
    pub vhost: Option<Resolved<String>>,
    pub timeout: Resolved<Duration>,
}

/// A context of the config file, with where each key was written.
#[derive(Debug, Clone, Default)]
pub struct Context {
    pub amqp_url: Option<String>,
    pub management_url: Option<String>,
    pub username: Option<String>,
    pub password_file: Option<PathBuf>,
    pub tls_ca_cert_file: Option<PathBuf>,
    pub tls_cert_file: Option<PathBuf>,
    pub tls_key_file: Option<PathBuf>,
    pub vhost: Option<String>,
    pub timeout: Option<Duration>,
}

/// The config file could not be used: its diagnostics, rendered like a spec's.
#[derive(Debug)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

/// The config file's path: `HOPPER_CONFIG`, else `$XDG_CONFIG_HOME/hopper/config.toml`, else
/// `~/.config/hopper/config.toml`.
pub fn config_path(env: &dyn Fn(&str) -> Option<String>) -> PathBuf {
    if let Some(path) = env("HOPPER_CONFIG").filter(|p| !p.is_empty()) {
        return PathBuf::from(path);
    }
    let base = env("XDG_CONFIG_HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env("HOME").unwrap_or_default()).join(".config"));
    base.join("hopper").join("config.toml")
}

/// Resolves every setting: flags > environment > context > defaults. `env` reads the
/// environment (injected, so that resolution is testable).
pub fn resolve(flags: &Flags, env: &dyn Fn(&str) -> Option<String>) -> Result<Resolution> {
    let env = |name: &str| env(name).filter(|v| !v.is_empty());
    // A setting's environment variable, when it is set, and the origin to record.
    let variable = |setting: Setting| {
        let variable = setting.variable()?;
        env(variable).map(|value| (value, Origin::Env { variable }))
    };
    let config_file = config_path(&env);
    let context_name = match (&flags.context, variable(Setting::Context)) {
        (Some(name), _) => Some(Resolved { value: name.clone(), origin: flag_of(Setting::Context) }),
        (None, Some((name, origin))) => Some(Resolved { value: name, origin }),
        (None, None) => None,
    };
    let context = match &context_name {
        Some(name) => load_context(&config_file, &name.value)?,
        None => Context::default(),
    };
    let from_context = || Origin::Context {
        context: context_name.as_ref().map(|c| c.value.clone()).unwrap_or_default(),
        file: config_file.clone(),
    };
    // One setting: the flag, the variable, the context's key, in that order.
    let pick = |flag: Option<String>, setting: Setting, key: Option<String>| {
        if let Some(value) = flag {
            Some(Resolved { value, origin: flag_of(setting) })
        } else if let Some((value, origin)) = variable(setting) {
            Some(Resolved { value, origin })
        } else {
            key.map(|value| Resolved { value, origin: from_context() })
        }
    };
    let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
    let as_path = |r: Option<Resolved<String>>| r.map(|r| Resolved { value: PathBuf::from(r.value), origin: r.origin });

    let amqp_url = pick(flags.amqp_url.clone(), Setting::AmqpUrl, context.amqp_url.clone())
        .unwrap_or(Resolved { value: DEFAULT_AMQP_URL.to_string(), origin: Origin::Default });
    let management_url = pick(flags.management_url.clone(), Setting::ManagementUrl, context.management_url.clone());
    let (url_user, url_password) = userinfo(&amqp_url.value);
    let username = pick(flags.username.clone(), Setting::Username, context.username.clone())
        .or_else(|| url_user.map(|user| Resolved { value: user, origin: Origin::Url }))
        .unwrap_or(Resolved { value: "guest".into(), origin: Origin::Default });

    let password = if let Some(file) = &flags.password_file {
        let origin = flag_of(Setting::PasswordFile);
        Resolved { value: password_file(file, origin.name())?, origin }
    } else {
        match (variable(Setting::PasswordFile), variable(Setting::Password)) {
            (Some((_, file)), Some((_, secret))) => bail!(
                "both {} and {} are set: set only one (the file keeps the password out of the environment)",
                file.name(),
                secret.name()
            ),
            (Some((file, origin)), None) => Resolved { value: password_file(Path::new(&file), origin.name())?, origin },
            (None, Some((secret, origin))) => {
                Resolved { value: PasswordSetting { password: Password::new(secret), file: None }, origin }
            }
            (None, None) => match (&context.password_file, url_password) {
                (Some(file), _) => {
                    Resolved { value: password_file(file, "the context's password_file")?, origin: from_context() }
                }
                (None, Some(password)) => {
                    Resolved { value: PasswordSetting { password, file: None }, origin: Origin::Url }
                }
                _ => Resolved {
                    value: PasswordSetting { password: Password::new("guest"), file: None },
                    origin: Origin::Default,
                },
            },
        }
    };

    let tls_ca_cert_file =
        as_path(pick(path(&flags.tls_ca_cert_file), Setting::TlsCaCertFile, path(&context.tls_ca_cert_file)));
    let tls_cert_file = as_path(pick(path(&flags.tls_cert_file), Setting::TlsCertFile, path(&context.tls_cert_file)));
    let tls_key_file = as_path(pick(path(&flags.tls_key_file), Setting::TlsKeyFile, path(&context.tls_key_file)));
    let timeout = match (flags.timeout, variable(Setting::Timeout), context.timeout) {
        (Some(t), _, _) => Resolved { value: t, origin: flag_of(Setting::Timeout) },
        (None, Some((text, origin)), _) => {
            Resolved { value: parse_timeout(&text).map_err(|e| anyhow!("{}: {e}", origin.name()))?, origin }
        }
        (None, None, Some(t)) => Resolved { value: t, origin: from_context() },
        (None, None, None) => Resolved { value: broker::DEFAULT_TIMEOUT, origin: Origin::Default },
    };
    let vhost = context.vhost.clone().map(|value| Resolved { value, origin: from_context() });
    Ok(Resolution {
        context: context_name,
        config_file,
        amqp_url,
        management_url,
        username,
        password,
        tls_ca_cert_file,
        tls_cert_file,
        tls_key_file,
        vhost,
        timeout,
    })
}

impl Resolution {
    /// What the broker module needs, TLS files read.
    pub fn settings(&self) -> Result<Settings> {
        let tls = Tls::load(
            self.tls_ca_cert_file.as_ref().map(|r| r.value.as_path()),
            self.tls_cert_file.as_ref().map(|r| r.value.as_path()),
            self.tls_key_file.as_ref().map(|r| r.value.as_path()),
        )?;
        Ok(Settings {
            amqp_urls: self.amqp_url.value.clone(),
            management_url: self.management_url.as_ref().map(|r| r.value.clone()),
            username: Some(self.username.value.clone()),
            password: Some(self.password.value.password.clone()),
            tls,
            timeout: Some(self.timeout.value),
        })
    }
}

impl Resolution {
    /// Refuses a context's vhost that is not the one the AMQP URL names: hopper will not guess
    /// which one is meant.
    pub fn check_vhost(&self, endpoint: &broker::Endpoint) -> Result<()> {
        if let (Some(context), Some(url)) = (&self.vhost, &endpoint.vhost)
            && context.value != *url
        {
            bail!(
                "the vhost of the {}, `{}`, and the vhost of the AMQP URL, `{url}`, disagree: hopper will not guess which one is meant; drop one of them, or make them the same (nothing was read or written)",
                context.origin,
                context.value
            );
        }
        Ok(())
    }
}

/// A `--timeout`: a humantime duration (`30s`, `2m`, `500ms`), more than zero.
pub fn parse_timeout(text: &str) -> Result<Duration, String> {
    match humantime::parse_duration(text.trim()) {
        Ok(d) if d.is_zero() => Err("a timeout must be more than zero".into()),
        Ok(d) => Ok(d),
        Err(e) => Err(format!("`{text}` is not a duration ({e}); for example 30s, 2m, 500ms")),
    }
}

/// The first AMQP URL's user and password, when it parses (a run refuses it otherwise) and
/// carries them.
fn userinfo(urls: &str) -> (Option<String>, Option<Password>) {
    match broker::uri::split(urls).first().map(|first| broker::uri::parse(first)) {
        Some(Ok(first)) => (first.user, first.password),
        _ => (None, None),
    }
}

/// A password from a file: its first line, without the line ending (files written by editors
/// and secret stores end with one). The path is named in errors, never the content.
fn password_file(path: &Path, given_by: &str) -> Result<PasswordSetting> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the password file {} ({given_by})", path.display()))?;
    let secret = text.strip_suffix('\n').map(|t| t.strip_suffix('\r').unwrap_or(t)).unwrap_or(&text);
    if secret.is_empty() {
        bail!("the password file {} ({given_by}) is empty", path.display());
    }
    Ok(PasswordSetting { password: Password::new(secret), file: Some(path.to_path_buf()) })
}

// ---------------------------------------------------------------------------------------------
// The config file
// ---------------------------------------------------------------------------------------------

/// Reads one context of the config file; every problem in the file is reported, with
/// file:line:col, as a spec's are.
pub fn load_context(file: &Path, name: &str) -> Result<Context> {
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "context `{name}` was asked for, but there is no config file at {} (set HOPPER_CONFIG to use another file)",
            file.display()
        ),
        Err(e) => bail!("cannot read the config file {}: {e}", file.display()),
    };
    let (contexts, diagnostics) = parse(&text, file);
    if !diagnostics.is_empty() {
        let mut sources = Sources::default();
        sources.add(file.to_path_buf(), without_passwords(&text));
        let n = diagnostics.len();
        let error = SpecError { sources, diagnostics };
        return Err(anyhow::Error::new(ConfigError(format!(
            "{}error: the config file has {n} error{}; nothing was sent to the broker",
            error.render_plain(),
            if n == 1 { "" } else { "s" }
        ))));
    }
    let known: Vec<_> = contexts.iter().map(|(n, _)| format!("`{n}`")).collect();
    match contexts.into_iter().find(|(n, _)| n == name) {
        Some((_, context)) => Ok(context),
        None => {
            bail!(
                "no context `{name}` in {}; {}",
                file.display(),
                if known.is_empty() {
                    "it has none: declare one as [context.NAME]".to_string()
                } else {
                    format!("it has {}", known.join(", "))
                }
            )
        }
    }
}

/// The file as diagnostics may quote it: the value of a `password` key (refused, but written
/// all the same) and whatever may be a password in a URL replaced by as many `*`, so spans
/// still fall where they should. The file may not parse, so a URL's password is found by line:
/// from the first `:` after a line's first `://` (or its first quote) to its last `@`.
fn without_passwords(text: &str) -> String {
    let mut bytes = text.as_bytes().to_vec();
    let mut line_start = 0;
    for line in text.split_inclusive('\n') {
        if let Some(at) = line.rfind('@') {
            let start = line[..at].find("://").map(|i| i + 3).or_else(|| line[..at].find(['"', '\'']).map(|i| i + 1));
            let start = start.unwrap_or(0);
            if let Some(colon) = line[start..at].find(':') {
                bytes[line_start + start + colon + 1..line_start + at].fill(b'*');
            }
        }
        line_start += line.len();
    }
    if let Ok(root) = DeTable::parse(text)
        && let Some(DeValue::Table(contexts)) = root.get_ref().get("context").map(|v| v.get_ref())
    {
        for (_, context) in contexts.iter() {
            if let DeValue::Table(fields) = context.get_ref()
                && let Some(value) = fields.get("password")
            {
                bytes[value.span()].fill(b'*');
            }
        }
    }
    String::from_utf8(bytes).unwrap_or_default()
}

/// Every context of a config file, and what is wrong in it. Relative paths are relative to the
/// file's directory.
pub fn parse(text: &str, file: &Path) -> (Vec<(String, Context)>, Vec<Diagnostic>) {
    let mut diags = Vec::new();
    let root = match DeTable::parse(text) {
        Ok(root) => root,
        Err(e) => {
            let span = e.span().unwrap_or(0..0);
            diags.push(
                Diagnostic::new(0, span, format!("invalid TOML: {}", e.message().trim_end()))
                    .label("here")
                    .hint("see https://toml.io for the syntax"),
            );
            return (Vec::new(), diags);
        }
    };
    let dir = file.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut contexts = Vec::new();
    for (key, value) in root.get_ref().iter() {
        let key_name: &str = key.get_ref();
        if key_name != "context" {
            diags.push(unknown(key.span(), key_name, "the top level", &["context"]).hint(format!(
                "the config file holds contexts only: [context.NAME] sections with {}",
                context_keys().join(", ")
            )));
            continue;
        }
        let DeValue::Table(table) = value.get_ref() else {
            diags.push(
                Diagnostic::new(0, value.span(), "`context` must be a table")
                    .label("not a table")
                    .hint("declare each context as a section: [context.prod]"),
            );
            continue;
        };
        for (name, value) in table.iter() {
            let name: &str = name.get_ref();
            let DeValue::Table(fields) = value.get_ref() else {
                diags.push(
                    Diagnostic::new(0, value.span(), format!("`context.{name}` must be a table"))
                        .label("not a table")
                        .hint(format!("declare it as a section: [context.{name}]")),
                );
                continue;
            };
            contexts.push((name.to_string(), context(fields, name, &dir, &mut diags)));
        }
    }
    // In the order of the file, as a reader goes through it.
    diags.sort_by_key(|d| d.span.start);
    (contexts, diags)
}

fn context(fields: &DeTable, name: &str, dir: &Path, diags: &mut Vec<Diagnostic>) -> Context {
    let mut c = Context::default();
    let where_ = format!("[context.{name}]");
    for (key, value) in fields.iter() {
        let key_name: &str = key.get_ref();
        let span = value.span();
        let Some(setting) = Setting::of_key(key_name) else {
            diags.push(if key_name == "password" {
                Diagnostic::new(0, key.span(), format!("unknown key `password` in {where_}"))
                    .label("unknown key")
                    .hint("a password never sits in the config file: name a file that holds it with password_file, or set HOPPER_PASSWORD")
            } else {
                unknown(key.span(), key_name, &where_, &context_keys())
            });
            continue;
        };
        let string = |diags: &mut Vec<Diagnostic>| match value.get_ref() {
            DeValue::String(s) => Some(s.to_string()),
            _ => {
                diags.push(type_error(span.clone(), setting));
                None
            }
        };
        let file = |diags: &mut Vec<Diagnostic>| string(diags).map(|s| dir.join(s));
        match setting {
            // A list names a cluster's nodes, tried in turn; kept as the flags take it.
            Setting::AmqpUrl => c.amqp_url = url_list(value.get_ref(), span.clone(), setting, diags),
            Setting::ManagementUrl => c.management_url = url_list(value.get_ref(), span.clone(), setting, diags),
            Setting::Username => c.username = string(diags),
            Setting::PasswordFile => c.password_file = file(diags),
            Setting::TlsCaCertFile => c.tls_ca_cert_file = file(diags),
            Setting::TlsCertFile => c.tls_cert_file = file(diags),
            Setting::TlsKeyFile => c.tls_key_file = file(diags),
            Setting::Vhost => c.vhost = string(diags),
            Setting::Timeout => {
                c.timeout = string(diags).and_then(|s| match parse_timeout(&s) {
                    Ok(d) => Some(d),
                    Err(e) => {
                        diags.push(Diagnostic::new(0, span.clone(), format!("`timeout`: {e}")).label("not a duration"));
                        None
                    }
                })
            }
            // Settings without a key: `of_key` never names them.
            Setting::Context | Setting::Password => {}
        }
    }
    c
}

/// The keys a context may hold.
fn context_keys() -> Vec<&'static str> {
    Setting::ALL.iter().filter_map(|s| s.key()).collect()
}

fn unknown(span: Range<usize>, name: &str, context: &str, known: &[&str]) -> Diagnostic {
    let hint = known
        .iter()
        .map(|k| (*k, strsim::jaro_winkler(name, k)))
        .filter(|(_, score)| *score > 0.8)
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(k, _)| format!("did you mean `{k}`?"))
        .unwrap_or_else(|| {
            let names: Vec<_> = known.iter().map(|k| format!("`{k}`")).collect();
            format!("known keys here: {}", names.join(", "))
        });
    Diagnostic::new(0, span, format!("unknown key `{name}` in {context}")).label("unknown key").hint(hint)
}

/// A URL or a list of them (a cluster's nodes), comma-joined as the flags take them.
fn url_list(value: &DeValue, span: Range<usize>, setting: Setting, diags: &mut Vec<Diagnostic>) -> Option<String> {
    let urls: Option<Vec<String>> = match value {
        DeValue::String(s) => Some(vec![s.to_string()]),
        DeValue::Array(items) => items
            .iter()
            .map(|i| match i.get_ref() {
                DeValue::String(s) => Some(s.to_string()),
                _ => None,
            })
            .collect(),
        _ => None,
    };
    if urls.is_none() {
        diags.push(type_error(span, setting));
    }
    urls.map(|u| u.join(","))
}

fn type_error(span: Range<usize>, setting: Setting) -> Diagnostic {
    let (key, expected) = (setting.name(), setting.holds());
    Diagnostic::new(0, span, format!("`{key}` must be {expected}"))
        .label(format!("expected {expected}"))
        .hint(format!("for example: {}", setting.example()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
    }

    #[test]
    fn flags_beat_the_environment_which_beats_defaults() {
        let env =
            env_of(&[("HOPPER_USERNAME", "from-env"), ("HOPPER_AMQP_URL", "amqp://env:5672"), ("HOME", "/nowhere")]);
        let flags = Flags { username: Some("from-flag".into()), ..Flags::default() };
        let r = resolve(&flags, &env).unwrap();
        assert_eq!(
            (r.username.value.as_str(), &r.username.origin),
            ("from-flag", &Origin::Flag { flag: "--username" })
        );
        assert_eq!(r.amqp_url.origin, Origin::Env { variable: "HOPPER_AMQP_URL" });
        assert_eq!((r.password.value.password.expose(), &r.password.origin), ("guest", &Origin::Default));
        assert_eq!(r.timeout.value, broker::DEFAULT_TIMEOUT);
    }

    #[test]
    fn credentials_in_the_url_count_when_nothing_else_says() {
        let env = env_of(&[("HOPPER_AMQP_URL", "amqp://app:s%40cret@h:5672"), ("HOME", "/nowhere")]);
        let r = resolve(&Flags::default(), &env).unwrap();
        assert_eq!((r.username.value.as_str(), &r.username.origin), ("app", &Origin::Url));
        assert_eq!(r.password.value.password.expose(), "s@cret");
    }

    /// A host as a test writes it in a URL, and what hopper must dial for it.
    #[derive(Debug, Clone)]
    enum GivenHost {
        Ip(std::net::IpAddr),
        Name(String),
    }

    fn given_host() -> impl proptest::strategy::Strategy<Value = GivenHost> {
        use proptest::prelude::*;
        let label = (
            proptest::char::range('a', 'z'),
            proptest::collection::vec(proptest::sample::select(b"abcz09-_".to_vec()), 0..6),
        )
            .prop_map(|(first, rest)| format!("{first}{}", String::from_utf8(rest).unwrap()));
        prop_oneof![
            any::<[u8; 4]>().prop_map(|b| GivenHost::Ip(std::net::Ipv4Addr::from(b).into())),
            any::<[u16; 8]>().prop_map(|s| GivenHost::Ip(std::net::Ipv6Addr::from(s).into())),
            proptest::collection::vec(label, 1..4).prop_map(|labels| GivenHost::Name(labels.join("."))),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config { cases: 500, failure_persistence: None, ..Default::default() })]

        /// Whatever URL is given, through the resolution `config show` uses: the node hopper
        /// dials is the host and port written, it signs in as the user and password written,
        /// in the vhost written, and what `config show` prints names the same node.
        #[test]
        fn what_hopper_dials_is_what_was_given(
            tls in proptest::bool::ANY,
            host in given_host(),
            port in proptest::option::of(1u16..),
            user in "\\PC{1,12}",
            password in "\\PC{0,12}",
            vhost in proptest::option::of("\\PC{1,12}"),
        ) {
            use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
            use std::net::ToSocketAddrs;
            let vhost = vhost.filter(|v| crate::spec::vhost_problem(v).is_none());
            let encoded = |s: &str| utf8_percent_encode(s, NON_ALPHANUMERIC).to_string();
            let written = match &host {
                GivenHost::Ip(std::net::IpAddr::V6(ip)) => format!("[{ip}]"),
                GivenHost::Ip(ip) => ip.to_string(),
                GivenHost::Name(name) => name.clone(),
            };
            let url = format!(
                "{}://{}:{}@{written}{}{}",
                if tls { "amqps" } else { "amqp" },
                encoded(&user),
                encoded(&password),
                port.map(|p| format!(":{p}")).unwrap_or_default(),
                vhost.as_deref().map(|v| format!("/{}", encoded(v))).unwrap_or_default(),
            );
            let flags = Flags { amqp_url: Some(url.clone()), ..Flags::default() };
            let resolution = resolve(&flags, &|name| (name == "HOME").then(|| "/nowhere".to_string())).unwrap();
            let endpoint = broker::Endpoint::from_settings(resolution.settings().unwrap()).unwrap();
            let port = port.unwrap_or(if tls { 5671 } else { 5672 });
            let node = &endpoint.nodes[0];
            let dialled = endpoint.dialled(node, endpoint.vhost.as_deref().unwrap_or("/"));
            proptest::prop_assert_eq!(dialled.authority.port, port);
            match &host {
                GivenHost::Ip(ip) => {
                    proptest::prop_assert_eq!(dialled.authority.host.parse::<std::net::IpAddr>().ok(), Some(*ip));
                    // An address's text is the address: no resolver is asked.
                    let addresses: Vec<_> = (dialled.authority.host.as_str(), port).to_socket_addrs().unwrap().collect();
                    proptest::prop_assert_eq!(addresses, vec![std::net::SocketAddr::new(*ip, port)]);
                }
                GivenHost::Name(name) => proptest::prop_assert_eq!(&dialled.authority.host, name),
            }
            proptest::prop_assert_eq!(&dialled.authority.userinfo.username, &user);
            proptest::prop_assert_eq!(&dialled.authority.userinfo.password, &password);
            proptest::prop_assert_eq!((&resolution.username.value, &resolution.username.origin), (&user, &Origin::Url));
            proptest::prop_assert_eq!(&endpoint.vhost, &vhost);
            proptest::prop_assert_eq!(&dialled.vhost, vhost.as_deref().unwrap_or("/"));
            let management = format!("{}://{written}:{}/api", if tls { "https" } else { "http" }, if tls { 15671 } else { 15672 });
            proptest::prop_assert_eq!(&endpoint.management_url, &management);
            // `config show` prints the node with its password hidden; read back, it is the same node.
            let shown = node.to_string();
            proptest::prop_assert!(!password.is_empty() || shown.contains(":***@"));
            let read_back = broker::uri::parse(&shown.replacen(":***@", &format!(":{}@", encoded(&password)), 1)).unwrap();
            proptest::prop_assert_eq!(&read_back, node);
        }
    }

    #[test]
    fn the_config_file_reports_unknown_keys_where_they_are() {
        let text = "[context.prod]\namqp_url = \"amqps://h:5671\"\npasword_file = \"x\"\n";
        let (contexts, diags) = parse(text, Path::new("/etc/hopper/config.toml"));
        assert_eq!(contexts.len(), 1);
        assert_eq!(diags.len(), 1);
        assert_eq!(diags[0].message, "unknown key `pasword_file` in [context.prod]");
        assert_eq!(diags[0].hint.as_deref(), Some("did you mean `password_file`?"));
        assert_eq!(&text[diags[0].span.clone()], "pasword_file");
    }

    #[test]
    fn paths_in_the_config_file_are_relative_to_it() {
        let (contexts, diags) = parse(
            "[context.a]\npassword_file = \"secret\"\namqp_url = [\"amqp://a\", \"amqp://b\"]\n",
            Path::new("/etc/hopper/config.toml"),
        );
        assert!(diags.is_empty());
        assert_eq!(contexts[0].1.password_file.as_deref(), Some(Path::new("/etc/hopper/secret")));
        assert_eq!(contexts[0].1.amqp_url.as_deref(), Some("amqp://a,amqp://b"));
    }
}
