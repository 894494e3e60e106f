//! Handlers with their payload types erased, as a runtime holds them: a
//! job handler for engine `E` (its apply step takes `E`'s job
//! transaction) and an effect. Decoding the payload is the prepare step's
//! first part. Writes no table.

use std::marker::PhantomData;

use serde::de::DeserializeOwned;

use crate::core::handler::{
    EffectContext, HandlerError, JobContext, Outcome, PrepareStop, Prepared,
};
use crate::driver::Engine;

/// A job handler with its payload type erased, for engine `E`: its apply
/// step takes that engine's job transaction.
pub(crate) trait ErasedHandler<E: Engine>: Send + Sync {
    /// False for apply-only handlers: their `prepare` only decodes the
    /// payload and runs no user code, so it may run on the writer.
    fn has_prepare(&self) -> bool;
    fn prepare(
        &self,
        ctx: &JobContext,
        payload: &str,
    ) -> std::result::Result<Prepared, PrepareStop>;
    fn apply<'a, 't: 'a>(
        &self,
        tx: &mut E::JobTx<'a, 't>,
        prepared: Prepared,
    ) -> std::result::Result<Outcome, HandlerError>;
}

/// The function of an apply step on engine `E`. Each engine implements it
/// for the closures its handlers are written as, whose transaction is its
/// own: a closure written for the other engine is not one.
pub(crate) trait ApplyFn<E: Engine, P>: Send + Sync {
    fn call<'a, 't: 'a>(
        &self,
        tx: &mut E::JobTx<'a, 't>,
        p: P,
    ) -> std::result::Result<Outcome, HandlerError>;
}

pub(crate) struct FnHandler<T, P, Prep, App> {
    pub prepare: Prep,
    pub apply: App,
    pub user_prepare: bool,
    pub _types: PhantomData<fn(T) -> P>,
}

impl<E, T, P, Prep, App> ErasedHandler<E> for FnHandler<T, P, Prep, App>
where
    E: Engine,
    T: DeserializeOwned + 'static,
    P: Send + 'static,
    Prep: Fn(&JobContext, T) -> std::result::Result<P, HandlerError> + Send + Sync,
    App: ApplyFn<E, P>,
{
    fn has_prepare(&self) -> bool {
        self.user_prepare
    }

    fn prepare(
        &self,
        ctx: &JobContext,
        payload: &str,
    ) -> std::result::Result<Prepared, PrepareStop> {
        decode_and_prepare(ctx, payload, &self.prepare)
    }

    fn apply<'a, 't: 'a>(
        &self,
        tx: &mut E::JobTx<'a, 't>,
        prepared: Prepared,
    ) -> std::result::Result<Outcome, HandlerError> {
        self.apply.call(tx, downcast::<P>(prepared)?)
    }
}

/// Decodes `payload` as `T` and runs `prepare` on it.
fn decode_and_prepare<T: DeserializeOwned, P: Send + 'static>(
    ctx: &JobContext,
    payload: &str,
    prepare: impl FnOnce(&JobContext, T) -> std::result::Result<P, HandlerError>,
) -> std::result::Result<Prepared, PrepareStop> {
    let value: T = serde_json::from_str(payload).map_err(|e| {
        PrepareStop::Hopeless(format!(
            "payload does not decode as {}: {e}",
            std::any::type_name::<T>()
        ))
    })?;
    match prepare(ctx, value) {
        Ok(p) => Ok(Box::new(p)),
        Err(e) if e.is::<crate::core::steps::StepTooLarge>() => {
            Err(PrepareStop::Hopeless(e.to_string()))
        }
        Err(e) => Err(PrepareStop::Failed(e.to_string())),
    }
}

/// The value a prepare step produced, as the apply step's type.
fn downcast<P: 'static>(prepared: Prepared) -> std::result::Result<P, HandlerError> {
    prepared
        .downcast::<P>()
        .map(|p| *p)
        .map_err(|_| HandlerError::from("internal: prepared value of the wrong type"))
}

/// An effect handler with its payload type erased.
pub(crate) trait ErasedEffect: Send + Sync {
    fn call(&self, ctx: &EffectContext, payload: &str) -> std::result::Result<(), String>;
}

pub(crate) struct FnEffect<T, F> {
    pub f: F,
    pub _types: PhantomData<fn(T)>,
}

impl<T, F> ErasedEffect for FnEffect<T, F>
where
    T: DeserializeOwned + 'static,
    F: Fn(&EffectContext, T) -> std::result::Result<(), HandlerError> + Send + Sync,
{
    fn call(&self, ctx: &EffectContext, payload: &str) -> std::result::Result<(), String> {
        let value: T = serde_json::from_str(payload).map_err(|e| {
            format!(
                "payload does not decode as {}: {e}",
                std::any::type_name::<T>()
            )
        })?;
        (self.f)(ctx, value).map_err(|e| e.to_string())
    }
}
