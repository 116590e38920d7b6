//! What a copy of a message keeps of its properties, for the two copiers: a migration's or a
//! left-over queue's move (`mover`), and a redrive (`redrive`).

use lapin::BasicProperties;
use lapin::types::ShortString;

/// Whether a copy keeps the message's `expiration`: a moved message keeps its own time to live;
/// a redriven one must not expire on its way back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiration {
    Keep,
    Drop,
}

/// Every property but `headers` and `user_id`, which each copier decides for itself.
pub fn copied(p: &BasicProperties, expiration: Expiration) -> BasicProperties {
    let mut copy = BasicProperties::default();
    macro_rules! keep {
        ($($get:ident => $set:ident),* $(,)?) => {$(
            if let Some(v) = p.$get() {
                copy = copy.$set(v.clone());
            }
        )*};
    }
    keep!(
        content_type => with_content_type,
        content_encoding => with_content_encoding,
        delivery_mode => with_delivery_mode,
        priority => with_priority,
        correlation_id => with_correlation_id,
        reply_to => with_reply_to,
        message_id => with_message_id,
        timestamp => with_timestamp,
        kind => with_type,
        app_id => with_app_id,
        cluster_id => with_cluster_id,
    );
    match (expiration, p.expiration()) {
        (Expiration::Keep, Some(e)) => copy.with_expiration(e.clone()),
        _ => copy,
    }
}

/// The message's `user_id` when it names the publishing user: RabbitMQ refuses a publish whose
/// user_id is another user's, and closes the channel.
pub fn own_user_id<'p>(p: &'p BasicProperties, user: &str) -> Option<&'p ShortString> {
    p.user_id().as_ref().filter(|u| u.as_str() == user)
}
