//! Named brokers: contexts in a config file, resolved flags > environment > context > defaults,
//! `hopper config show` saying where each setting came from, and a config file's mistakes
//! reported with file:line:col like a spec's.

use serde_json::{Value, json};

use crate::support::{self, Broker, Vhost, hopper_env, text};

const BROKER: Broker = Broker::RabbitMq3_10;

/// A config file in the vhost's directory with one context for the test broker, its password
/// in a file beside it (named relative to the config file).
fn config(vhost: &Vhost) -> String {
    std::fs::write(vhost.dir.join("password"), "guest\n").unwrap();
    let path = vhost.dir.join("config.toml");
    std::fs::write(
        &path,
        format!(
            "[context.test]\namqp_url = [\"{}\"]\nmanagement_url = \"{}\"\nusername = \"guest\"\npassword_file = \"password\"\nvhost = \"{}\"\ntimeout = \"20s\"\n",
            BROKER.amqp(),
            BROKER.management(),
            vhost.name
        ),
    )
    .unwrap();
    path.display().to_string()
}

fn show(args: &[&str], env: &[(&str, &str)]) -> Value {
    let mut all = vec!["--format", "json", "config", "show"];
    all.extend_from_slice(args);
    let out = hopper_env(&all, env);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A context drives apply and inspect (its vhost is inspect's); `config show` names it.
#[tokio::test]
async fn a_context_names_the_broker() {
    let vhost = Vhost::new(BROKER, "config-context").await;
    let config = config(&vhost);
    let spec = vhost.spec("orders.toml", "[topology.orders]\ndelays = [\"1s\"]\n");
    let env = [("HOPPER_CONFIG", config.as_str())];
    let out = hopper_env(&["apply", "--context", "test", spec.to_str().unwrap()], &env);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // No --vhost: the context's.
    let out = hopper_env(&["--format", "json", "inspect"], &[("HOPPER_CONFIG", &config), ("HOPPER_CONTEXT", "test")]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let reports: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(reports["vhosts"][0]["vhost"], vhost.name.as_str(), "{reports:#}");

    let shown = show(&["--context", "test"], &env);
    let context = json!({"from": "context", "context": "test", "file": config});
    assert_eq!(shown["context"], json!({"name": "test", "origin": {"from": "flag", "flag": "--context"}}));
    let settings = &shown["settings"];
    assert!(support::matches(&settings["amqp_url"], &context), "{shown:#}");
    assert!(support::matches(&settings["username"], &json!({"value": "guest"})), "{shown:#}");
    let password_file = vhost.dir.join("password").display().to_string();
    assert_eq!(settings["password"]["value"], "***");
    assert_eq!(settings["password"]["file"], password_file.as_str());
    assert_eq!(settings["vhost"]["value"], vhost.name.as_str());
    assert_eq!(settings["timeout"]["value"], "20s");
}

/// Flags beat the environment, which beats the context, which beats defaults.
#[tokio::test]
async fn flags_beat_env_beat_context_beat_defaults() {
    let vhost = Vhost::new(BROKER, "config-precedence").await;
    let config = config(&vhost);
    let env = [("HOPPER_CONFIG", config.as_str()), ("HOPPER_CONTEXT", "test"), ("HOPPER_USERNAME", "from-env")];
    let shown = show(&["--timeout", "5s"], &env);
    let s = &shown["settings"];
    assert_eq!(s["username"], json!({"value": "from-env", "from": "env", "variable": "HOPPER_USERNAME"}));
    assert_eq!(s["timeout"], json!({"value": "5s", "from": "flag", "flag": "--timeout"}));
    assert_eq!(s["vhost"]["from"], "context");
    assert_eq!(shown["context"]["origin"], json!({"from": "env", "variable": "HOPPER_CONTEXT"}));
    let shown = show(&["--username", "from-flag"], &env);
    assert_eq!(shown["settings"]["username"]["from"], "flag");
    // No context: defaults, and the table says so.
    let out = hopper_env(&["config", "show"], &[]);
    assert_eq!(out.status.code(), Some(0));
    let table = text(&out.stdout);
    assert!(table.contains("amqp_url          amqp://localhost:5672  (default)"), "{table}");
    assert!(table.contains("password          ***  (default)"), "{table}");
}

/// Unknown keys are errors with file:line:col and a hint, as in a spec; a password itself is
/// refused with the way to give one.
#[tokio::test]
async fn a_config_files_mistakes_are_shown_where_they_are() {
    let vhost = Vhost::new(BROKER, "config-errors").await;
    let path = vhost.dir.join("config.toml");
    std::fs::write(
        &path,
        "[context.prod]\namqp_url = \"amqps://rabbit:5671\"\npasword_file = \"x\"\npassword = \"hunter2\"\n",
    )
    .unwrap();
    let config = path.display().to_string();
    let out = hopper_env(&["config", "show", "--context", "prod"], &[("HOPPER_CONFIG", &config)]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains(&format!("{config}:3:1")), "{stderr}");
    assert!(stderr.contains("unknown key `pasword_file` in [context.prod]"), "{stderr}");
    assert!(stderr.contains("hint: did you mean `password_file`?"), "{stderr}");
    assert!(
        stderr.contains(&format!("{config}:4:1")) && stderr.contains("a password never sits in the config file"),
        "{stderr}"
    );
    assert!(stderr.contains("error: the config file has 2 errors; nothing was sent to the broker"), "{stderr}");
    assert!(!stderr.contains("hunter2"), "{stderr}");

    let out = hopper_env(&["config", "show", "--context", "staging"], &[("HOPPER_CONFIG", &config)]);
    assert_eq!(out.status.code(), Some(2));

    std::fs::write(&path, "[context.prod]\namqp_url = \"amqps://rabbit:5671\"\n").unwrap();
    let out = hopper_env(&["config", "show", "--context", "staging"], &[("HOPPER_CONFIG", &config)]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(text(&out.stderr).trim_end(), format!("error: no context `staging` in {config}; it has `prod`"));
    let out = hopper_env(&["config", "show", "--context", "prod"], &[("HOPPER_CONFIG", "/nonexistent/hopper.toml")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("there is no config file at /nonexistent/hopper.toml"), "{}", text(&out.stderr));
}
