//! `hopper config show`: the broker settings a run would use, secrets redacted, and where each
//! came from (flag, environment, context, the URL, default). Connects to nothing.

use anyhow::Result;
use serde_json::{Value, json};

use super::BrokerArgs;
use crate::Exit;
use crate::broker::{Endpoint, redact, uri};
use crate::config::{Origin, Resolution, Resolved, Setting};
use crate::output::{self, Format};

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Print the resolved broker settings (secrets redacted) and where each came from.
    #[command(after_help = "\
Examples:
  hopper config show
  hopper config show --context prod
  HOPPER_CONTEXT=prod hopper config show --format json")]
    Show(ShowArgs),
}

#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    #[command(flatten)]
    pub broker: BrokerArgs,
}

pub fn run(command: Command, format: Format) -> Result<Exit> {
    let Command::Show(args) = command;
    let resolution = args.broker.resolve()?;
    // Building the endpoint reads the TLS files and checks the URLs, as a real run would.
    let endpoint =
        resolution.settings().and_then(Endpoint::from_settings).and_then(|e| resolution.check_vhost(&e).map(|()| e));
    let rows = rows(&resolution, endpoint.as_ref().ok());
    match format {
        Format::Json => {
            let settings: serde_json::Map<String, Value> =
                rows.iter().map(|r| (r.name.to_string(), r.json())).collect();
            output::document(&json!({
                "config_file": resolution.config_file,
                "context": resolution.context.as_ref().map(|c| json!({"name": c.value, "origin": c.origin})),
                "settings": settings,
            }))?;
        }
        Format::Table => {
            let mut lines =
                vec![format!("config file       {}", output::safe(&resolution.config_file.display().to_string()))];
            match &resolution.context {
                Some(c) => lines.push(format!("context           {} ({})", output::safe(&c.value), c.origin)),
                None => lines.push("context           (none: --context or HOPPER_CONTEXT picks one)".to_string()),
            }
            for r in &rows {
                lines.push(format!("{:<17} {}  ({})", r.name, output::safe(&r.shown), r.from));
            }
            output::print(&lines.join("\n"))?;
        }
    }
    Ok(match endpoint {
        Ok(_) => Exit::Ok,
        Err(e) => {
            eprintln!("error: these settings cannot be used: {}", output::safe(&format!("{e:#}")));
            Exit::Error
        }
    })
}

struct Row {
    name: &'static str,
    shown: String,
    from: String,
    origin: Option<Origin>,
    file: Option<String>,
}

impl Row {
    fn json(&self) -> Value {
        let mut v = json!({ "value": self.shown });
        if let Some(origin) = &self.origin
            && let (Value::Object(map), Value::Object(o)) =
                (&mut v, serde_json::to_value(origin).unwrap_or(Value::Null))
        {
            map.extend(o);
        }
        if let Some(file) = &self.file {
            v["file"] = json!(file);
        }
        v
    }
}

fn row<T>(name: &'static str, r: &Resolved<T>, shown: String) -> Row {
    Row { name, shown, from: r.origin.to_string(), origin: Some(r.origin.clone()), file: None }
}

fn rows(r: &Resolution, endpoint: Option<&Endpoint>) -> Vec<Row> {
    let path = |p: &Option<Resolved<std::path::PathBuf>>, name: &'static str| match p {
        Some(p) => row(name, p, p.value.display().to_string()),
        None => Row { name, shown: "(none)".into(), from: "not set".into(), origin: None, file: None },
    };
    // The URLs as parsed, which is what a run dials; as given, redacted, when one does not parse.
    let nodes: Result<Vec<_>, _> = uri::split(&r.amqp_url.value).into_iter().map(uri::parse).collect();
    let amqp_urls = match &nodes {
        Ok(nodes) => nodes.iter().map(ToString::to_string).collect::<Vec<_>>().join(","),
        Err(_) => redact(&r.amqp_url.value),
    };
    let mut rows = vec![row(Setting::AmqpUrl.name(), &r.amqp_url, amqp_urls)];
    rows.push(match (&r.management_url, endpoint) {
        (Some(m), _) => row(Setting::ManagementUrl.name(), m, redact(&m.value)),
        (None, Some(e)) => Row {
            name: Setting::ManagementUrl.name(),
            shown: e.management_url.clone(),
            from: "default: the first AMQP node's host".into(),
            origin: Some(Origin::Default),
            file: None,
        },
        (None, None) => Row {
            name: Setting::ManagementUrl.name(),
            shown: "(from the AMQP URL)".into(),
            from: "default".into(),
            origin: Some(Origin::Default),
            file: None,
        },
    });
    rows.push(row(Setting::Username.name(), &r.username, r.username.value.clone()));
    let mut password = row(Setting::Password.name(), &r.password, "***".into());
    if let Some(file) = &r.password.value.file {
        password.from = format!("file {}, {}", file.display(), password.from);
        password.file = Some(file.display().to_string());
    }
    rows.push(password);
    rows.push(path(&r.tls_ca_cert_file, Setting::TlsCaCertFile.name()));
    rows.push(path(&r.tls_cert_file, Setting::TlsCertFile.name()));
    rows.push(path(&r.tls_key_file, Setting::TlsKeyFile.name()));
    let url_vhost = nodes.iter().flatten().find_map(|n| n.vhost.clone());
    rows.push(match (&r.vhost, url_vhost) {
        (_, Some(vhost)) => Row {
            name: Setting::Vhost.name(),
            shown: vhost,
            from: Origin::Url.to_string(),
            origin: Some(Origin::Url),
            file: None,
        },
        (Some(v), None) => row(Setting::Vhost.name(), v, v.value.clone()),
        (None, None) => Row {
            name: Setting::Vhost.name(),
            shown: "/".into(),
            from: "default; a spec names its own, --vhost overrides".into(),
            origin: Some(Origin::Default),
            file: None,
        },
    });
    rows.push(row(Setting::Timeout.name(), &r.timeout, humantime::format_duration(r.timeout.value).to_string()));
    rows
}
