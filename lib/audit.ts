/**
 * The gateway's side of the audit log: one entry per answered request (this rule), handed to the node's audit shipper
 * by `emitAudit` (events/audit-shipper.ts), which stores it in the durable event stream for the logger (workers/logger.worker.ts).
 * Cheap and never waiting: a few property reads and an array push on the request path. Never carries a body, a
 * token, a header or the query string (`?token=` may be one).
 */
import { randomUUID } from "crypto";

/** The consumer group of the audit entries (the logger's service name). */
export const AUDIT_GROUP = "logger";
/** The longest path kept (the logger's column bound): a batch of entries stays small whatever the URLs. */
const MAX_PATH = 2000;

export interface AuditRequest {
	/** The gateway's context id of the request (unique; not the client-supplied X-Request-ID): the logger stores one row per id. */
	request_id?: string;
	/** Milliseconds since the epoch, when the response was decided. */
	at: number;
	method: string;
	/** The path only. */
	path: string;
	/** The action the route maps to, e.g. `content.notes.create`. */
	action?: string;
	service?: string;
	collection?: string;
	document_id?: string;
	status: number;
	duration_ms?: number;
	uid?: string;
	aid?: string;
	cid?: string;
	session?: string;
	ip?: string;
	/** The answer was a kept one, replayed under its Idempotency-Key (nothing ran). */
	replayed?: true;
}

/** What moleculer-web leaves on the request. */
export interface AuditedReq {
	method?: string;
	url?: string;
	originalUrl?: string;
	$ctx?: { id?: string; meta?: { token?: { uid?: string; aid?: string; cid?: string; session?: string }; ip?: string } };
	$route?: { name?: string };
	$action?: { name?: string; collection?: { service?: string; collection?: string } };
	$alias?: { action?: string };
	$params?: { params?: { id?: unknown } };
	$startedAt?: bigint;
	/** Set by the gateway when it replays a kept answer (services/api/idempotency.ts). */
	$replayed?: boolean;
}

/** Routes that are not audited: health probes, metrics scrapes and the API docs would drown the log. */
const UNAUDITED_ROUTES = new Set(["ops"]);

/** `ipOf`: the caller's address when the request never reached a route (the route's `onBeforeCall` sets `meta.ip`). */
export function auditEntry(req: AuditedReq, status: number, data?: unknown, ipOf?: () => string): AuditRequest | null {
	if (req.$route?.name && UNAUDITED_ROUTES.has(req.$route.name)) return null;
	const meta = req.$ctx?.meta;
	const t = meta?.token;
	const action = req.$action?.name ?? req.$alias?.action;
	const col = req.$action?.collection;
	const body = data && typeof data === "object" ? (data as { data?: { id?: unknown } }).data : undefined;
	// The response's document (creates, and `?ref=` reads whose path holds the ref), else the path's id.
	const docId = typeof body?.id === "string" ? body.id : req.$params?.params?.id;
	const url = req.originalUrl ?? req.url ?? "";
	const q = url.indexOf("?");
	return {
		// A request that never got a context still gets an id: redelivered, it must not become a second row.
		request_id: req.$ctx?.id ?? randomUUID(),
		at: Date.now(),
		method: req.method ?? "GET",
		path: (q === -1 ? url : url.slice(0, q)).slice(0, MAX_PATH),
		action,
		service: col?.service ?? (action ? action.split(".")[0] : undefined),
		collection: col?.collection,
		document_id: typeof docId === "string" ? docId.slice(0, 200) : undefined,
		status,
		duration_ms: req.$startedAt ? Number(process.hrtime.bigint() - req.$startedAt) / 1e6 : undefined,
		uid: t?.uid,
		aid: t?.aid,
		cid: t?.cid,
		session: t?.session,
		ip: meta?.ip ?? ipOf?.(),
		...(req.$replayed ? { replayed: true as const } : {}),
	};
}
