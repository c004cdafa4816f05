/**
 * Every local action runs in a unit of work (stores/unit.ts): its document writes and its change events
 * commit together. Before the action calls another one (local or remote), what it has written is committed: the
 * callee never waits on a row lock its caller holds (no deadlock across actions or nodes) and reads what was written.
 */
import type { Middleware } from "moleculer";
import { servesRequest, type RequestMeta } from "../lib/types";
import { flushUnit, hasOpenTransaction, unitOfWork } from "./unit";

/**
 * Test-only (test/e2e/write-kill.test.ts): the process SIGKILLs itself once an action whose body's `title` is this
 * text has committed, before its reply leaves: a crash between a write and its acknowledgement, on purpose.
 * Unset (always, outside that test), no middleware is added for it.
 */
const CRASH_AFTER_COMMIT = process.env.TEST_CRASH_AFTER_COMMIT;

/**
 * The unit-of-work middleware; then the test-only crash when it is set. Moleculer wraps each middleware around the ones listed before it, so the crash runs
 * once the unit has committed. `deadlineMs` (REQUEST_DB_DEADLINE_MS): the deadline of each statement of a unit whose
 * action serves a client's request.
 */
export function unitOfWorkMiddlewares(deadlineMs?: number): Middleware[] {
	return [unitOfWorkMiddleware(deadlineMs), ...(CRASH_AFTER_COMMIT ? [CrashAfterCommitMiddleware] : [])];
}

const CrashAfterCommitMiddleware = {
	name: "CrashAfterCommit",
	localAction(handler: (ctx: unknown) => Promise<unknown>) {
		return async function (this: unknown, ctx: { params?: { body?: { title?: unknown } } }) {
			const out = await handler.call(this, ctx);
			if (ctx.params?.body?.title === CRASH_AFTER_COMMIT) process.kill(process.pid, "SIGKILL");
			return out;
		};
	},
} as unknown as Middleware;

/**
 * The collection actions that only read (a saga's read records its stage through a call, which gets a unit of its own):
 * nothing of theirs to commit, so no unit, no scope, and (no unit running) no promise hooks (stores/unit.ts).
 */
const READ_OPS = new Set(["get", "list", "count", "cursor"]);
/**
 * The gateway's actions write no documents of a domain: what it stores itself (Idempotency-Key records) must be
 * committed when written, before the answer leaves, not when the request's action returns after it.
 */
const NO_UNIT_SERVICES = new Set(["api"]);

/**
 * Every local action (but the reads) in a unit of work; an action that serves a client's request (lib/types.ts
 * `servesRequest`) with the request's deadline on each of its statements. The reads get theirs from the store they
 * read (engine/collection.mixin.ts), without a unit.
 */
export const unitOfWorkMiddleware = (deadlineMs?: number): Middleware =>
	({
		name: "UnitOfWork",
		localAction(handler: (ctx: unknown) => Promise<unknown>, action?: { collection?: { op?: string }; service?: { name?: string } }) {
			if (READ_OPS.has(action?.collection?.op ?? "") || NO_UNIT_SERVICES.has(action?.service?.name ?? "")) return handler;
			return function (this: unknown, ctx: { meta?: RequestMeta }) {
				return unitOfWork(() => handler.call(this, ctx), servesRequest(ctx?.meta) ? deadlineMs : undefined);
			};
		},
		// Local event handlers (broker events, not the change stream) get a unit of their own too: never the emitter's.
		localEvent(handler: (ctx: unknown) => Promise<unknown>) {
			return function (this: unknown, ctx: unknown) {
				return unitOfWork(() => handler.call(this, ctx));
			};
		},
		call(next: (...args: unknown[]) => Promise<unknown> & { ctx?: unknown }) {
			return function (...args: unknown[]) {
				// Nothing to commit: the broker's own promise, whose `ctx` carries the callee's meta back to the caller.
				if (!hasOpenTransaction()) return next(...args);
				let inner: (Promise<unknown> & { ctx?: unknown }) | undefined;
				const p = flushUnit().then(() => (inner = next(...args)));
				// Moleculer's call interceptor assigns `ctx` on every middleware's promise (`promise.ctx = result.ctx`, where
				// `result` is whatever call of the process ran `next` last, not necessarily this one): the assignment must be
				// accepted (a getter alone throws in strict mode: a 500) and ignored, the getter keeps this call's context.
				Object.defineProperty(p, "ctx", { get: () => inner?.ctx, set: () => undefined });
				return p;
			};
		},
	}) as unknown as Middleware;
