/**
 * The gateway's side of the audit log: one `audit.request` event per answered request, balanced to the logger
 * (workers/logger.worker.ts), which stores it. Cheap and fire-and-forget: a few property reads and one emit, no
 * await on the request path. Never carries a body, a token, a header or the query string (`?token=` may be one).
 */
import type { ServiceBroker } from "moleculer";

export const AUDIT_REQUEST_EVENT = "audit.request";
/** The consumer group the event is balanced to (the logger's service name). */
export const AUDIT_GROUP = "logger";

export interface AuditRequest {
	/** The gateway's context id of the request (unique; not the client-supplied X-Request-ID). */
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
}

/** What moleculer-web leaves on the request. */
interface AuditedReq {
	method?: string;
	url?: string;
	originalUrl?: string;
	$ctx?: { id?: string; meta?: { token?: { uid?: string; aid?: string; cid?: string; session?: string }; ip?: string } };
	$route?: { name?: string };
	$action?: { name?: string; collection?: { service?: string; collection?: string } };
	$alias?: { action?: string };
	$params?: { params?: { id?: unknown } };
	$startedAt?: bigint;
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
		request_id: req.$ctx?.id,
		at: Date.now(),
		method: req.method ?? "GET",
		path: q === -1 ? url : url.slice(0, q),
		action,
		service: col?.service ?? (action ? action.split(".")[0] : undefined),
		collection: col?.collection,
		document_id: typeof docId === "string" ? docId : undefined,
		status,
		duration_ms: req.$startedAt ? Number(process.hrtime.bigint() - req.$startedAt) / 1e6 : undefined,
		uid: t?.uid,
		aid: t?.aid,
		cid: t?.cid,
		session: t?.session,
		ip: meta?.ip ?? ipOf?.(),
	};
}

/** Emits the request's audit event (never throws, never waits). */
export function emitAudit(broker: ServiceBroker, req: AuditedReq, status: number, data?: unknown, ipOf?: () => string): void {
	try {
		const entry = auditEntry(req, status, data, ipOf);
		if (entry) void Promise.resolve(broker.emit(AUDIT_REQUEST_EVENT, entry, { groups: [AUDIT_GROUP] })).catch(() => undefined);
	} catch {
		/* auditing never breaks a response */
	}
}
