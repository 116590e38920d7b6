//! The owners' records: one global parameter per owner and vhost (`live::Record`). Read with the
//! vhost's listings; written by `apply` before it changes anything, so that what a run made is
//! claimed even when the run stops partway.

use anyhow::{Result, anyhow};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Api, HttpError, segment, why};
use crate::broker::Endpoint;
use crate::live::{PARAMETER_PREFIX, Record, Records};

/// A global parameter as `/api/global-parameters` lists it.
#[derive(Debug, Deserialize)]
pub(super) struct GlobalParameter {
    name: String,
    #[serde(default)]
    value: Value,
}

/// The records of `vhost` among every global parameter. A user without the `policymaker` tag
/// may not list them: that is said, not taken for no records. A record hopper cannot read is
/// an error naming it: what it claims is not guessed.
pub(super) fn of_vhost(listed: Result<Vec<GlobalParameter>, HttpError>, vhost: &str) -> Result<Records, HttpError> {
    let listed = match listed {
        Ok(listed) => listed,
        Err(HttpError::Status { status: status @ (401 | 403), .. }) => return Ok(Records::Refused { status }),
        Err(e) => return Err(e),
    };
    let mut records = Vec::new();
    for p in listed.into_iter().filter(|p| p.name.starts_with(PARAMETER_PREFIX)) {
        let record: Record = serde_json::from_value(p.value).map_err(|e| HttpError::NotJson {
            detail: format!(
                "the global parameter {:?} is not an owner record hopper can read ({e}); delete it or put back what hopper wrote",
                p.name
            ),
        })?;
        if record.vhost == vhost {
            if p.name != Record::parameter(&record.owner, vhost) {
                return Err(HttpError::NotJson {
                    detail: format!(
                        "the global parameter {:?} holds the record of owner `{}` in vhost `{vhost}`, which hopper keeps as {:?}; rename it",
                        p.name,
                        record.owner,
                        Record::parameter(&record.owner, vhost)
                    ),
                });
            }
            records.push(record);
        }
    }
    records.sort_by(|a, b| a.owner.cmp(&b.owner));
    Ok(Records::Read(records))
}

/// Writes an owner's record, replacing the one before.
pub async fn write_record(endpoint: &Endpoint, record: &Record) -> Result<()> {
    let api = Api::new(endpoint);
    let name = Record::parameter(&record.owner, &record.vhost);
    let body = json!({ "name": name, "value": record });
    api.put(&format!("/global-parameters/{}", segment(&name)), &body).await.map_err(|e| match e {
        HttpError::Status { status: 401 | 403, .. } => anyhow!(
            "the management API refused to record what owner `{}` made in vhost `{}` (the global parameter {name:?}): user `{}` needs the `policymaker` tag (`rabbitmqctl set_user_tags`)",
            record.owner,
            record.vhost,
            endpoint.username()
        ),
        other => anyhow::Error::new(why(&api, &other)),
    })
}
