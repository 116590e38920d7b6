//! Every broker setting and the places it may be given, written once: the flags' help
//! (`commands::BrokerArgs`), the resolution and its origins, the config file's keys, `hopper
//! config show` and the book's table (docs/connection.md, checked by a test) all read it here.

/// One broker setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    Context,
    AmqpUrl,
    ManagementUrl,
    Username,
    PasswordFile,
    Password,
    TlsCaCertFile,
    TlsCertFile,
    TlsKeyFile,
    Timeout,
    Vhost,
}

impl Setting {
    pub const ALL: &[Setting] = &[
        Setting::Context,
        Setting::AmqpUrl,
        Setting::ManagementUrl,
        Setting::Username,
        Setting::PasswordFile,
        Setting::Password,
        Setting::TlsCaCertFile,
        Setting::TlsCertFile,
        Setting::TlsKeyFile,
        Setting::Timeout,
        Setting::Vhost,
    ];

    /// Its name in `config show` and, where it has one, its key in a context of the config file.
    pub fn name(self) -> &'static str {
        match self {
            Setting::Context => "context",
            Setting::AmqpUrl => "amqp_url",
            Setting::ManagementUrl => "management_url",
            Setting::Username => "username",
            Setting::PasswordFile => "password_file",
            Setting::Password => "password",
            Setting::TlsCaCertFile => "tls_ca_cert_file",
            Setting::TlsCertFile => "tls_cert_file",
            Setting::TlsKeyFile => "tls_key_file",
            Setting::Timeout => "timeout",
            Setting::Vhost => "vhost",
        }
    }

    /// The key of a context of the config file. A context does not name a context, and a
    /// password never sits in the file: it names a file that holds it.
    pub fn key(self) -> Option<&'static str> {
        match self {
            Setting::Context | Setting::Password => None,
            other => Some(other.name()),
        }
    }

    /// The setting a context's key sets.
    pub fn of_key(key: &str) -> Option<Setting> {
        Setting::ALL.iter().copied().find(|s| s.key() == Some(key))
    }

    /// The flag. `--vhost` belongs to the commands that read one vhost, not to every command.
    pub fn flag(self) -> Option<&'static str> {
        match self {
            Setting::Context => Some("--context"),
            Setting::AmqpUrl => Some("--amqp-url"),
            Setting::ManagementUrl => Some("--management-url"),
            Setting::Username => Some("--username"),
            Setting::PasswordFile => Some("--password-file"),
            // A password on the command line would be in every process list.
            Setting::Password => None,
            Setting::TlsCaCertFile => Some("--tls-ca-cert-file"),
            Setting::TlsCertFile => Some("--tls-cert-file"),
            Setting::TlsKeyFile => Some("--tls-key-file"),
            Setting::Timeout => Some("--timeout"),
            Setting::Vhost => Some("--vhost"),
        }
    }

    /// The environment variable.
    pub fn variable(self) -> Option<&'static str> {
        match self {
            Setting::Context => Some("HOPPER_CONTEXT"),
            Setting::AmqpUrl => Some("HOPPER_AMQP_URL"),
            Setting::ManagementUrl => Some("HOPPER_MANAGEMENT_URL"),
            Setting::Username => Some("HOPPER_USERNAME"),
            Setting::PasswordFile => Some("HOPPER_PASSWORD_FILE"),
            Setting::Password => Some("HOPPER_PASSWORD"),
            Setting::TlsCaCertFile => Some("HOPPER_TLS_CA_CERT_FILE"),
            Setting::TlsCertFile => Some("HOPPER_TLS_CERT_FILE"),
            Setting::TlsKeyFile => Some("HOPPER_TLS_KEY_FILE"),
            Setting::Timeout => Some("HOPPER_TIMEOUT"),
            // A vhost is the spec's, or the URL's: an ambient one would apply a spec elsewhere.
            Setting::Vhost => None,
        }
    }

    /// What the setting is, in a few words (the flag's help, the book's first column).
    pub fn meaning(self) -> &'static str {
        match self {
            Setting::Context => "the context of the config file to use",
            Setting::AmqpUrl => {
                "AMQP URL (`amqp://` or `amqps://`); several, comma-separated, name the nodes of a cluster, tried in turn"
            }
            Setting::ManagementUrl => {
                "management API base URL, `http://` or `https://`; several, comma-separated, are tried in turn"
            }
            Setting::Username => "user for both endpoints, instead of the URL's",
            Setting::PasswordFile => {
                "a file holding the password (its first line), so that it is in no URL and no process list"
            }
            Setting::Password => "the password itself",
            Setting::TlsCaCertFile => "PEM file of a CA to trust, besides the system's",
            Setting::TlsCertFile => "PEM client certificate, for brokers that require one (`fail_if_no_peer_cert`)",
            Setting::TlsKeyFile => "PEM private key of the client certificate, unencrypted (PKCS#8, PKCS#1 or SEC1)",
            Setting::Timeout => {
                "how long to wait to connect, for a TLS handshake and for each request: `30s`, `2m`, `500ms`"
            }
            Setting::Vhost => "the vhost: instead of the spec's, or the one `inspect` and `graph --live` read",
        }
    }

    /// What a run uses when nothing gives the setting, as the book says it.
    pub fn default(self) -> &'static str {
        match self {
            Setting::Context => {
                "none: the config file (`HOPPER_CONFIG`, else `~/.config/hopper/config.toml`) is not read"
            }
            Setting::AmqpUrl => "`amqp://localhost:5672`",
            Setting::ManagementUrl => {
                "`http://<AMQP host>:15672/api` for each AMQP node (`https` and 15671 for `amqps`)"
            }
            Setting::Username => "the first AMQP URL's user, else `guest`",
            Setting::PasswordFile | Setting::Password => "the first AMQP URL's password, else `guest`",
            Setting::TlsCaCertFile => "the system's trusted roots only",
            Setting::TlsCertFile | Setting::TlsKeyFile => "no client certificate",
            Setting::Timeout => "`30s`",
            Setting::Vhost => {
                "the spec's `vhost`, else the AMQP URL's; for `inspect` and `graph --live`, the URL's, else the context's, else `/`"
            }
        }
    }

    /// What a context's key must hold, for its error messages.
    pub fn holds(self) -> &'static str {
        match self {
            Setting::AmqpUrl | Setting::ManagementUrl => "a string or an array of strings",
            Setting::Timeout => "a duration",
            _ => "a string",
        }
    }

    /// A line of a context that sets it, for hints.
    pub fn example(self) -> &'static str {
        match self {
            Setting::Context => "[context.prod]",
            Setting::AmqpUrl => r#"amqp_url = "amqps://rabbit-1.example.com:5671""#,
            Setting::ManagementUrl => r#"management_url = "https://rabbit.example.com:15671/api""#,
            Setting::Username => r#"username = "deployer""#,
            Setting::PasswordFile => r#"password_file = "/run/secrets/rabbitmq""#,
            Setting::Password => "HOPPER_PASSWORD=...",
            Setting::TlsCaCertFile => r#"tls_ca_cert_file = "/etc/hopper/ca.pem""#,
            Setting::TlsCertFile => r#"tls_cert_file = "/etc/hopper/client.pem""#,
            Setting::TlsKeyFile => r#"tls_key_file = "/etc/hopper/client.key""#,
            Setting::Timeout => r#"timeout = "30s""#,
            Setting::Vhost => r#"vhost = "orders""#,
        }
    }

    /// The flag's help: what it is, then where else it may be given and its default, as
    /// `--help` and the man pages show them.
    pub fn help(self) -> String {
        let mut help = self.meaning().replace('`', "");
        let mut chars = help.chars();
        help = chars.next().map(|c| c.to_uppercase().chain(chars).collect()).unwrap_or_default();
        let variables: Vec<_> = [Some(self), (self == Setting::PasswordFile).then_some(Setting::Password)]
            .into_iter()
            .flatten()
            .filter_map(|s| s.variable())
            .collect();
        if !variables.is_empty() {
            help.push_str(&format!(" [env: {}]", variables.join(", or the password itself in ")));
        }
        if let Some(key) = self.key() {
            help.push_str(&format!(" [context key: {key}]"));
        }
        help.push_str(&format!(" [default: {}]", self.default().replace('`', "")));
        help
    }
}
