/**
 * The request, response, route and alias as moleculer-web and the gateway leave them (moleculer-web's own typings
 * declare its request with `any` fields and none of the gateway's): what the gateway's handlers, services/api/*.ts and
 * the MCP endpoint read and set on them.
 */
import type { IncomingMessage, ServerResponse } from "http";
import type { Context } from "moleculer";
import type { RequestMeta } from "../../lib/types";

/** What an alias's action is called with (every route is `mergeParams: false`): the body, the query and the path's parameters apart. */
export interface AliasParams {
	body?: unknown;
	query?: Record<string, unknown>;
	params?: Record<string, unknown>;
}

/** The meta of a request's Context: the request's facts (lib/types.ts), and what the called action answers in it. */
export type GatewayMeta = RequestMeta & { $statusCode?: number };

/** The Context a request's actions are called through. */
export type GatewayContext = Context<unknown, GatewayMeta>;

/** A route middleware (its body parsers), as moleculer-web composes them. */
export type RouteMiddleware = (req: IncomingMessage, res: ServerResponse, next: (err?: unknown) => void) => void;

/** A route as moleculer-web builds it from the schema's `routes`. */
export interface WebRoute {
	name?: string;
	/** The route's path prefix ("" for every route of the gateway). */
	path: string;
	opts?: { authentication?: unknown };
	middlewares: RouteMiddleware[];
	/** Every route of the gateway has one (its `common` settings). */
	onBeforeCall(this: unknown, ctx: GatewayContext, route: WebRoute, req: GatewayRequest, res: GatewayResponse, alias?: unknown): Promise<void>;
}

/** An alias as moleculer-web resolves it (one line of a route's `aliases`). */
export interface WebAlias {
	route: WebRoute;
	action?: string;
	handler?: unknown;
	type?: string;
	/** The alias's path as the catalog writes it (`/content/notes/:id`). */
	path?: string;
	method: string;
	fullPath: string;
	isMethod(method: string): boolean;
	match(url: string): false | Record<string, unknown>;
}

/** The request once moleculer-web (or the gateway's own path, services/api/lean-route.ts) has routed it. */
export type GatewayRequest = IncomingMessage & {
	$ctx: GatewayContext;
	$params?: AliasParams;
	$alias?: { action?: string; path?: string; method?: string; fullPath?: string };
	$route?: WebRoute;
	query?: Record<string, unknown>;
	originalUrl?: string;
	/** When the gateway began to serve it (metrics' request duration). */
	$startedAt?: bigint;
	/** Answered by the gateway from a kept answer (services/api/idempotency.ts). */
	$replayed?: boolean;
	/** A tool call of the MCP endpoint standing for this request (services/api/mcp.ts). */
	$viaMcp?: boolean;
};

export type GatewayResponse = ServerResponse & { $route?: WebRoute };
