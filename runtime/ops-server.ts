/**
 * The ops listener of a node without the gateway: `GET /status` and `GET /metrics` on a domain's or worker's own
 * spec port (3020..3150, 4010..4070), so an orchestrator or Prometheus can probe each node directly. Plain
 * node:http: two fixed routes need no framework. A service may add its own routes (`extra`); never over these two.
 * With METRICS_TOKEN set, `/metrics` (here and on the gateway) answers only requests carrying it as their bearer.
 */
import { createHash, timingSafeEqual } from "crypto";
import http, { type IncomingMessage, type Server, type ServerResponse } from "http";
import type { AddressInfo } from "net";
import { ApiError, retryAfterOf, toErrorBody } from "../lib/errors";
import type { Health } from "./health";

export interface OpsServerOptions {
	host: string;
	port: number;
	/** The node's (or service's) own health; a failure or a timeout reports 503. */
	status(): Promise<Health>;
	/** Prometheus text exposition. */
	metrics(): string;
	/** METRICS_TOKEN: when set, `/metrics` needs `Authorization: Bearer <it>` (401 otherwise). */
	metricsToken?: string;
	/** How long /status waits for the health check before answering 503. */
	statusTimeoutMs?: number;
	/** Further routes of one service (the preserver's MQTT hooks): resolves true when it answered the request. */
	extra?: (req: IncomingMessage, res: ServerResponse) => Promise<boolean>;
}

export const PROMETHEUS_TYPE = "text/plain; version=0.0.4; charset=utf-8";

const digest = (v: string) => createHash("sha256").update(v).digest();

/** Whether the request may read the metrics: no METRICS_TOKEN, or its bearer in the Authorization header (compared in constant time). */
export function metricsAuthorized(req: IncomingMessage, token: string | undefined): boolean {
	if (!token) return true;
	const m = /^Bearer\s+(\S+)\s*$/i.exec(String(req.headers.authorization ?? "").trim());
	return !!m && timingSafeEqual(digest(m[1]), digest(token));
}

/** The answer to a metrics request without the token (sent with `WWW-Authenticate: Bearer`). */
export const METRICS_UNAUTHORIZED = () => new ApiError(401, "metrics token is required");

function send(res: ServerResponse, status: number, body: string, type: string, extra: Record<string, string> = {}): void {
	res.writeHead(status, { "Content-Type": type, "Content-Length": Buffer.byteLength(body), "Cache-Control": "no-store", ...extra });
	res.end(body);
}

function sendJson(res: ServerResponse, status: number, body: unknown, extra?: Record<string, string>): void {
	send(res, status, JSON.stringify(body), "application/json; charset=utf-8", extra);
}

function sendError(res: ServerResponse, err: unknown, extra?: Record<string, string>): void {
	const body = toErrorBody(err);
	const retryAfter = retryAfterOf(err, body.statusCode);
	sendJson(res, body.statusCode, body, retryAfter === undefined ? extra : { ...extra, "Retry-After": String(retryAfter) });
}

/** Resolves with the health, or with an `error` body when it fails or takes longer than `ms`. */
async function boundedHealth(check: () => Promise<Health>, ms: number): Promise<Health> {
	let timer: NodeJS.Timeout | undefined;
	const timeout = new Promise<Health>((resolve) => {
		timer = setTimeout(() => resolve({ status: "error", info: { health: { status: "down", message: "health check timed out" } } }), ms);
	});
	try {
		const h = await Promise.race([check(), timeout]);
		return h && (h.status === "ok" || h.status === "error") && h.info ? h : { status: "error", info: {} };
	} catch {
		return { status: "error", info: { health: { status: "down", message: "health check failed" } } };
	} finally {
		clearTimeout(timer);
	}
}

export function opsHandler(opts: OpsServerOptions) {
	const timeoutMs = opts.statusTimeoutMs ?? 2000;
	return async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
		const path = (req.url ?? "/").split("?")[0];
		if (path !== "/status" && path !== "/metrics" && opts.extra && (await opts.extra(req, res))) return;
		if (path !== "/status" && path !== "/metrics") return sendError(res, new ApiError(404, "not found"));
		if (req.method !== "GET" && req.method !== "HEAD") return sendError(res, new ApiError(405, `${req.method} is not allowed on ${path}`), { Allow: "GET, HEAD" });
		if (path === "/status") {
			const h = await boundedHealth(opts.status, timeoutMs);
			return sendJson(res, h.status === "ok" ? 200 : 503, h);
		}
		if (!metricsAuthorized(req, opts.metricsToken)) return sendError(res, METRICS_UNAUTHORIZED(), { "WWW-Authenticate": "Bearer" });
		let text: string;
		try {
			text = opts.metrics();
		} catch {
			return sendError(res, new ApiError(500, "metrics unavailable"));
		}
		send(res, 200, text, PROMETHEUS_TYPE);
	};
}

/** Starts listening; rejects (EADDRINUSE, EACCES...) when the port cannot be bound. */
export async function startOpsServer(opts: OpsServerOptions): Promise<Server> {
	const handle = opsHandler(opts);
	const server = http.createServer((req, res) => {
		// Mapped like the gateway's errors: a dependency outage in a hook (the preserver's cache) is a 503, a bug a 500.
		handle(req, res).catch((err) => {
			if (!res.headersSent) sendError(res, err);
			else res.end();
		});
	});
	// Probes are short; do not let idle keep-alive sockets hold a stopping node.
	server.keepAliveTimeout = 5000;
	await new Promise<void>((resolve, reject) => {
		const onError = (err: Error) => reject(err);
		server.once("error", onError);
		server.listen(opts.port, opts.host, () => {
			server.off("error", onError);
			resolve();
		});
	});
	return server;
}

export async function stopOpsServer(server: Server | undefined): Promise<void> {
	if (!server?.listening) return;
	await new Promise<void>((resolve) => {
		server.close(() => resolve());
		server.closeAllConnections();
	});
}

export function boundPort(server: Server): number {
	return (server.address() as AddressInfo).port;
}
