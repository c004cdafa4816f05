/**
 * Calls that survive a node going away (docs/production.md, "Failover"). Wraps `broker.call` (every call a node makes,
 * the gateway's included), so a retry goes through the balancer again and lands on another node, after the timeout
 * and circuit breaker of the failed attempt rather than inside them:
 * - a call that never ran (no node yet, transporter down, refused by a stopping node) waits for a node for up to
 *   FAILOVER_WAIT_MS, whatever the action: running it later runs it once;
 * - a call cut off by its node's disconnection or timed out may have run: sent again only for idempotent actions
 *   (reads), at most twice, to a node not tried yet when there is one. A create that may have committed is never repeated; its caller gets the 503/504;
 * - a call given an endpoint that is no longer registered (moleculer-web chooses it before authenticating the request;
 *   its node may have stopped and gone meanwhile) goes through the balancer instead: sent to a node that has left,
 *   nobody would answer or refuse it, and the caller would wait out requestTimeout.
 */
import type { ServiceBroker } from "moleculer";
import { isIdempotent, maybeRan, neverRan } from "./failover";

const MAYBE_RAN_RETRIES = 2;
const FIRST_DELAY_MS = 100;
const MAX_DELAY_MS = 1000;

type CallPromise = Promise<unknown> & { ctx?: unknown };
/** An action name, or an endpoint the caller already chose through the balancer (moleculer-web does so). */
type Target = string | { id?: string; action?: { name?: string } };
type Call = (action: Target, params?: unknown, opts?: Record<string, any>) => CallPromise;

interface Endpoint {
	id: string;
	isAvailable: boolean;
	action?: any;
}

function endpoints(broker: ServiceBroker, action: string): Endpoint[] {
	return ((broker.registry as any).getActionEndpoints(action)?.endpoints as Endpoint[] | undefined) ?? [];
}

function idempotent(broker: ServiceBroker, action: string): boolean {
	return isIdempotent(endpoints(broker, action)[0]?.action);
}

/** A node not tried yet when there is one (the balancer could pick a failing node again), else the balancer's. */
function another(broker: ServiceBroker, action: string, tried: Set<string>): Target {
	const left = endpoints(broker, action).filter((e) => e.isAvailable && !tried.has(e.id));
	return left.length ? left[Math.floor(Math.random() * left.length)] : action;
}

/** `target` itself while its node still serves the action; else the action's name, for the balancer to choose. */
function current(broker: ServiceBroker, target: Target, action: string | undefined): Target {
	if (typeof target === "string" || !action) return target;
	return endpoints(broker, action).some((e) => e === target && e.isAvailable) ? target : action;
}

/** A stream is consumed by the first attempt: it cannot be sent twice. */
const replayable = (params: unknown) => !(params && typeof (params as { pipe?: unknown }).pipe === "function");

export function FailoverMiddleware(waitMs: number) {
	let broker: ServiceBroker;
	return {
		name: "Failover",
		created(b: ServiceBroker) {
			broker = b;
		},
		call(next: Call): Call {
			return function failoverCall(target, params, opts = {}) {
				const action = typeof target === "string" ? target : target?.action?.name;
				// One process (no transporter): no other node to go to, none to wait for. A call aimed at one node
				// (opts.nodeID) is about that node; `retries: 0` opts out.
				if (!broker.transit) return next(target, params, opts);
				if (!action || opts.nodeID || opts.retries === 0 || !replayable(params)) return next(current(broker, target, action), params, opts);
				const start = Date.now();
				let reruns = 0;
				// The broker's promise carries the callee's context (its meta goes back to the caller): the last attempt's.
				let inner: CallPromise | undefined;
				const tried = new Set<string>();
				const p = (async () => {
					for (let attempt = 1, to = current(broker, target, action); ; attempt++) {
						try {
							return await (inner = next(to, params, { ...opts }));
						} catch (err) {
							const node = (inner?.ctx as { endpoint?: { id?: string } } | undefined)?.endpoint?.id;
							if (node) tried.add(node);
							const delay = Math.min(FIRST_DELAY_MS * 2 ** (attempt - 1), MAX_DELAY_MS);
							const again = neverRan(err, action, broker.nodeID)
								? Date.now() - start + delay <= waitMs
								: maybeRan(err, action) && reruns++ < MAYBE_RAN_RETRIES && idempotent(broker, action);
							if (!again) throw err;
							broker.logger.warn(`failover: ${action} again after ${(err as Error).name} (attempt ${attempt + 1})`);
							await new Promise((r) => setTimeout(r, delay));
							to = another(broker, action, tried);
						}
					}
				})();
				// Moleculer also sets `ctx` on a call middleware's promise, from the first attempt: the getter stays.
				Object.defineProperty(p, "ctx", { get: () => inner?.ctx, set: () => undefined });
				return p;
			};
		},
	};
}
