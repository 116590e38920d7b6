//! The AMQP half of `scripts/bench --move`: fills a queue, and waits for a queue to hold a count,
//! exactly (a passive declaration's count, not the management API's, which lags by seconds).
//!
//!     bench_queue fill AMQP_URL QUEUE N BYTES    N persistent messages, confirmed
//!     bench_queue wait AMQP_URL QUEUE N SECONDS  until QUEUE holds N; prints the epoch time then

use std::time::{Duration, Instant, SystemTime};

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Confirmation, Connection, ConnectionProperties};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, command, url, queue, n, extra] = args.as_slice() else {
        return Err("usage: bench_queue fill|wait AMQP_URL QUEUE N BYTES|SECONDS".into());
    };
    let n: u32 = n.parse()?;
    let connection = Connection::connect(url, ConnectionProperties::default()).await?;
    let channel = connection.create_channel().await?;
    match command.as_str() {
        "fill" => {
            channel.confirm_select(ConfirmSelectOptions::default()).await?;
            let body = vec![b'x'; extra.parse()?];
            // Confirmed in windows: the broker is never more than a window behind.
            for start in (0..n).step_by(1000) {
                let mut confirms = Vec::new();
                for i in start..n.min(start + 1000) {
                    let properties =
                        BasicProperties::default().with_delivery_mode(2).with_message_id(format!("m-{i}").into());
                    let options = BasicPublishOptions { mandatory: true, immediate: false };
                    confirms.push(
                        channel.basic_publish("".into(), queue.as_str().into(), options, &body, properties).await?,
                    );
                }
                for confirm in confirms {
                    if !matches!(confirm.await?, Confirmation::Ack(None)) {
                        return Err(format!("a message to {queue} was not routed or not confirmed").into());
                    }
                }
            }
        }
        "wait" => {
            let deadline = Instant::now() + Duration::from_secs(extra.parse()?);
            let options = QueueDeclareOptions { passive: true, ..Default::default() };
            loop {
                let count = channel.queue_declare(queue.as_str().into(), options, FieldTable::default()).await?;
                if count.message_count() == n {
                    let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH)?;
                    println!("{:.6}", now.as_secs_f64());
                    break;
                }
                if Instant::now() > deadline {
                    return Err(format!("{queue} holds {} messages, not {n}", count.message_count()).into());
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        other => return Err(format!("unknown command {other}").into()),
    }
    let _ = connection.close(200, "done".into()).await;
    Ok(())
}
