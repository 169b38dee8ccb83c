//! The worker's Chat model: Dynamo's frontend forwards OpenAI `/v1/chat/completions` and
//! `/v1/completions` requests unchanged (a `Text`-input card: the chat template and tokenizer are
//! the engine's), and reads OpenAI chunks back. The request and the chunks are
//! `fastvideo_engine::chat`'s, as `fastvideo serve` answers them; the replies always stream (the
//! frontend folds them for a client that did not ask to), with `usage` on a last chunk unless the
//! client streams without `stream_options.include_usage`.

use std::sync::Arc;

use async_trait::async_trait;
use dynamo_runtime::engine::{AsyncEngine, AsyncEngineContextProvider, DataStream};
use dynamo_runtime::pipeline::{ManyOut, ResponseStream, SingleIn};
use dynamo_runtime::protocols::annotated::Annotated;
use fastvideo_engine::chat::{self as chat_api, ChatModel, ChatParams, ChatRoute, PreparedChat};
use fastvideo_engine::{Engine, EngineError};
use fastvideo_request::chat::ChatCodec;
use futures::stream;
use serde_json::{json, Value};

use crate::handler::{failure, Live, Load};
use crate::protocol;

/// Fields the frontend adds for other backends: not ours to read.
const FRONTEND_FIELDS: [&str; 2] = ["nvext", "chat_template_args"];

/// The language model's endpoint on the worker's engine.
pub struct ChatHandler {
    pub engine: Engine,
    /// Its engine model id (the card's name).
    pub id: String,
    pub codec: Arc<dyn ChatCodec>,
    pub load: Arc<Load>,
}

impl ChatHandler {
    /// The checked request, or the error the frontend answers with (a 400 naming the field).
    fn prepare(
        &self,
        mut request: Value,
        id: &str,
    ) -> Result<(ChatRoute, PreparedChat), dynamo_runtime::error::DynamoError> {
        if let Some(o) = request.as_object_mut() {
            for f in FRONTEND_FIELDS {
                o.remove(f);
            }
        }
        // A text completion has a `prompt`; anything else is a chat (whose `messages` may be missing).
        let route = if request.get("prompt").is_some() { ChatRoute::Completions } else { ChatRoute::Chat };
        let invalid = |e: fastvideo_request::RequestError| protocol::engine_error(&EngineError::Invalid(e));
        let params: ChatParams = serde_json::from_value(request).map_err(|e| {
            // serde names an unknown field in backquotes; other errors name none.
            let text = e.to_string();
            let field = text.strip_prefix("unknown field `").and_then(|r| r.split('`').next()).unwrap_or("request");
            invalid(fastvideo_request::RequestError::new(field, text.clone()))
        })?;
        let context = self.engine.limits_of(&self.id).map_or(u32::MAX, |l| l.max_steps) as usize;
        let model = ChatModel { id: &self.id, codec: self.codec.as_ref(), context };
        let prep = params.prepare(route, &model, id.to_string()).map_err(invalid)?;
        Ok((route, prep))
    }

    /// The whole reply of a checked request, as chunks.
    async fn reply(
        self: Arc<Self>,
        route: ChatRoute,
        mut prep: PreparedChat,
        tx: tokio::sync::mpsc::UnboundedSender<Annotated<Value>>,
    ) {
        let _live = Live::new(&self.load);
        let handle = match self.engine.submit(prep.request.clone()) {
            Ok(h) => h,
            Err(e) => {
                let _ = tx.send(failure(protocol::engine_error(&e)));
                return;
            }
        };
        let (id, created, model) = (handle.request_id.clone(), protocol::now() as u64, self.id.clone());
        let chunk = |delta: Value, reason: Option<&str>| {
            Annotated::from_data(chat_api::chunk(route, &id, created, &model, delta, reason))
        };
        // The frontend's aggregator needs the role on a chat's first chunk.
        if route == ChatRoute::Chat && tx.send(chunk(json!({"role": "assistant", "content": ""}), None)).is_err() {
            self.engine.cancel(&handle.request_id);
            return;
        }
        let out =
            chat_api::follow_chat(&self.engine, self.codec.as_ref(), handle, &mut prep.stop, prep.max_tokens, |t| {
                tx.send(chunk(json!({"content": t}), None)).is_ok()
            })
            .await;
        match out {
            Ok((n, reason)) => {
                let _ = tx.send(chunk(json!({}), Some(reason)));
                if !prep.stream || prep.include_usage {
                    let usage = chat_api::usage(prep.prompt_tokens, n);
                    let _ = tx.send(Annotated::from_data(chat_api::usage_chunk(route, &id, created, &model, usage)));
                }
            }
            Err(e) => {
                let _ = tx.send(failure(protocol::engine_error(&e)));
            }
        }
    }
}

/// The Chat endpoint.
#[derive(Clone)]
pub struct ChatEndpoint(pub Arc<ChatHandler>);

#[async_trait]
impl AsyncEngine<SingleIn<Value>, ManyOut<Annotated<Value>>, anyhow::Error> for ChatEndpoint {
    async fn generate(&self, input: SingleIn<Value>) -> anyhow::Result<ManyOut<Annotated<Value>>> {
        let ctx = input.context();
        let (request, _) = input.into_parts();
        let id = format!("chatcmpl-{}", ctx.id());
        let stream: DataStream<Annotated<Value>> = match self.0.prepare(request, &id) {
            Err(e) => Box::pin(stream::once(async move { failure(e) })),
            Ok((route, prep)) => {
                let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
                let engine = self.0.engine.clone();
                let ctx2 = ctx.clone();
                // A client that goes away cancels its generation.
                let watch = tokio::spawn(async move {
                    ctx2.stopped().await;
                    engine.cancel(&id);
                });
                let handler = self.0.clone();
                tokio::spawn(async move {
                    handler.reply(route, prep, tx).await;
                    watch.abort();
                });
                Box::pin(stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|v| (v, rx)) }))
            }
        };
        Ok(ResponseStream::new(stream, ctx))
    }
}
