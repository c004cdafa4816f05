/**
 * The gateway's own path for the authenticated collection routes (the "api" route's action aliases: get, list,
 * count, create, patch, remove...). moleculer-web serves a request through a private `api.rest` action: a first
 * Moleculer call, through every broker middleware (metrics, context tracker, error handler, timeout, unit of work,
 * authority's wrap...), before the collection action's own call. Here the request gets the Context that call would
 * create, tracked as the context tracker would track it, and then runs moleculer-web's own steps (its route
 * middlewares, aliasHandler: onBeforeCall, authentication, the collection action through `ctx.call`, onAfterCall,
 * sendResponse) and its error path. Only the first call's per-request overhead goes; the collection action is still
 * called through the broker (authority, unit of work, remote nodes). Every other request (other routes, custom
 * handlers, OPTIONS, unmatched paths) keeps moleculer-web's handler.
 */
import type { IncomingMessage, ServerResponse } from "http";
import type { Context } from "moleculer";
import { Errors } from "moleculer";
const { compose } = require("moleculer-web/src/utils") as { compose: (...mws: unknown[]) => (req: unknown, res: unknown, done: (err?: unknown) => void) => void };

type Middleware = (req: IncomingMessage, res: ServerResponse, next: (err?: unknown) => void) => void;

/** What this path reads of an alias moleculer-web resolves. */
export interface LeanAlias {
	action?: string;
	handler?: unknown;
	type?: string;
	route: { name?: string; middlewares: Middleware[] };
}

/** The alias moleculer-web would resolve for the request, when it is one this path serves. */
export interface LeanMatch<A extends LeanAlias = LeanAlias> {
	/** The request path without its query string and trailing slash (moleculer-web's `req.parsedUrl`). */
	url: string;
	found: { alias: A; params: Record<string, unknown> };
}

/**
 * The request's alias, if moleculer-web would route it to an action alias of the route named `routeName`, or to any
 * alias of the route named `ownRoute` (a route whose handler the gateway runs itself: `/mcp`), with the same url and
 * method its `api.rest` handler resolves with; undefined otherwise, and when resolving throws.
 */
export function leanMatch<A extends LeanAlias>(
	req: IncomingMessage,
	resolve: (url: string, method: string) => LeanMatch<A>["found"] | false | undefined | null,
	routeName: string,
	ownRoute?: string,
): LeanMatch<A> | undefined {
	const method = req.method;
	// OPTIONS resolves with Access-Control-Request-Method in moleculer-web: it keeps its own path.
	if (!method || method === "OPTIONS") return undefined;
	const raw = req.url ?? "";
	const q = raw.indexOf("?", 1);
	let url = q === -1 ? raw : raw.substring(0, q);
	if (url.length > 1 && url.endsWith("/")) url = url.slice(0, -1);
	let found: LeanMatch<A>["found"] | false | undefined | null;
	try {
		found = resolve(url, method);
	} catch {
		// A path parameter that does not decode (`%E0`): moleculer-web's handler answers its error.
		return undefined;
	}
	if (!found) return undefined;
	const alias = found.alias;
	if (ownRoute !== undefined && alias.route.name === ownRoute) return { url, found };
	if (alias.route.name !== routeName || typeof alias.handler === "function" || !alias.action || alias.type === "stream") return undefined;
	return { url, found };
}

/** composeThen's conversion of a middleware's error (moleculer-web src/utils.js). */
function composedError(err: unknown): Error {
	if (err instanceof Errors.MoleculerError) return err;
	if (err instanceof Error) {
		const e = err as Error & { code?: unknown; status?: unknown; type?: string };
		return new Errors.MoleculerError(e.message, (e.code || e.status) as number, e.type as string);
	}
	return new Errors.MoleculerError(err as string);
}

/**
 * moleculer-web's composeThen (the route's middlewares: its body parsers), without a promise when every middleware
 * calls `next` before returning (a request without a body): undefined then, else a promise; a middleware's error
 * is thrown or rejected as composeThen rejects it.
 */
export function runRouteMiddlewares(self: unknown, req: IncomingMessage, res: ServerResponse, mws: Middleware[]): Promise<void> | undefined {
	if (mws.length === 0) return undefined;
	let outcome: { err?: unknown } | undefined;
	let settle: ((o: { err?: unknown }) => void) | undefined;
	compose.call(self, ...mws)(req, res, (err?: unknown) => {
		const o = { err };
		if (settle) settle(o);
		else outcome = o;
	});
	if (outcome) {
		if (outcome.err) throw composedError(outcome.err);
		return undefined;
	}
	return new Promise<void>((resolve, reject) => {
		settle = (o) => (o.err ? reject(composedError(o.err)) : resolve());
	});
}

/** The Moleculer error handler middleware's conversion of a rejection that is not an Error, and its `err.ctx`. */
export function actionError(err: unknown, ctx: Context): Error {
	const e = err instanceof Error ? err : new Errors.MoleculerError(err as string, 500);
	Object.defineProperty(e, "ctx", { value: ctx, writable: true, enumerable: false });
	return e;
}
