/** The shared parameters (`#/components/parameters`) and error responses (`#/components/responses`) of every operation. */
import { STATUS_NAMES } from "../errors";
import { ref, type Schema } from "./common";

export const qp = (name: string, description: string, schema: Schema = { type: "string" }): Schema => ({ name, in: "query", required: false, description, schema });
export const hp = (name: string, description: string): Schema => ({ name, in: "header", required: false, description, schema: { type: "string" } });

export const PARAMETERS: Record<string, Schema> = {
	id: {
		name: "id",
		in: "path",
		required: true,
		description: "Document id (24-hex object id); on GET with `ref=true`, the document's `ref`",
		schema: { type: "string" },
	},
	query: qp(
		"query",
		"Filter as a JSON object string in document-store query notation (operators such as `$regex`, `$gte`, `$in`, `$or`); `{}` matches all. `$where`, `$function`, `$expr` and JavaScript answer 400.",
	),
	pagination: qp("pagination", "JSON object string `{ limit: number, skip: number, sort: { <field>: 1 or -1 } }`; `limit` default 10, at most 100; `skip` ≥ 0."),
	projection: qp("projection", "JSON object string `{ <field>: 1 }` including only the listed fields (`{ <field>: 0 }` excludes them)."),
	populate: qp(
		"populate",
		"Expands relation fields: a JSON array of `{ path, select?, match? }` or a comma-separated list of paths. Only fields the collection declares as relations can be populated; paths without a read grant are dropped.",
	),
	zone: qp(
		"zone",
		"Comma-separated list from `own`, `share`, `group`, `client`; default `own,share`. Zones combine by OR; an unknown zone answers 400. May also be sent as header `x-zone`.",
	),
	ref: qp("ref", "`true`: the path value is the document's `ref` instead of its id.", { type: "string", enum: ["true", "false"] }),
	live: qp(
		"live",
		"`true`: after the matches, instead of `event: end`, one `event: live` frame and then one `event: change` frame per change of the caller's view (`data: { op: enter | update | leave, id, data? }`, `id: <position>`), decided at each change with the caller's current grants; `Last-Event-ID: <position>` (or `last_event_id`) resumes after a position (410 frame beyond the retention); a 401 frame ends it when the token stops being valid.",
		{ type: "string", enum: ["true", "false"] },
	),
	last_event_id: qp("last_event_id", "With `live=true`: the position to resume after, like the `Last-Event-ID` header."),
	lastEventId: qp("lastEventId", "What EventSource polyfills add on a reconnect: the same as the `Last-Event-ID` header, which wins when both come."),
	token: qp("token", "Alternative carrier of the bearer token (instead of `Authorization: Bearer <token>`; the `authorization` cookie works too)."),
	xZone: hp("x-zone", "Same as the `zone` query parameter (the query parameter wins)."),
	xExcludeSoftDelete: hp("x-exclude-soft-delete-query", "When present (any value), soft-deleted documents are not filtered out."),
	xApiKey: hp("x-api-key", "Required when the token is strict: the encrypted ApiToken (see schema `ApiToken`)."),
	xSagaSession: hp(
		"x-saga-session",
		"Saga id (essential/sagas): the request is applied at once and recorded as a stage of that saga; a write is compensated if the saga is aborted or expires (docs/sagas.md). The saga must be the caller's (404 `saga <id> not found`) and in flight (409 `saga <id> is not in flight`). Echoed in the response.",
	),
	xCanWithPolicies: hp("x-can-with-policies", "When present, the response includes the matching policies."),
	xCanWithIdPolicies: hp("x-can-with-id-policies", "When present, the response includes id-level policies."),
	shareKey: qp("key", "A share key of the file (POST /special/files/{id}/share)."),
	ifMatch: hp(
		"If-Match",
		"Writes only if the document is still as read: `*`, or its `ETag` (a list of tags: any of them). Another tag, or a weak one, answers 412 `precondition failed` and changes nothing; checked atomically with the write.",
	),
	ifNoneMatch: hp("If-None-Match", "The document's `ETag` as last read (a list, `W/` forms or `*` too): 304, no body, while it is still the tag."),
	idempotencyKey: hp(
		"Idempotency-Key",
		"1 to 255 printable ASCII characters (else 400), the caller's own (keys of other principals never meet): the first request runs and its answer (status below 500) is kept for 24 hours; a repeat with the same key, method, path, query and body (an upload: the same fields and files, whatever its multipart boundary) answers it again with `Idempotent-Replayed: true` and does nothing else; the key with another request answers 422, a repeat while the first runs 409. A request answered 5xx (or never answered) is safe to retry with its key: it has written once or not at all.",
	),
	range: hp("range", "One byte range, `bytes=<start>-<end>`, `bytes=<start>-` or `bytes=-<suffix>`: 206 with `Content-Range`; several ranges are ignored (200)."),
};

export const ERROR_RESPONSES: Record<number, { name: string; description: string; example: string; retryAfter?: boolean }> = {
	400: { name: "BadRequest", description: "Invalid body, query or parameter; the message names the field", example: "title is required" },
	401: {
		name: "Unauthorized",
		description:
			"Missing, malformed, forged or expired token (`authorization token is required`, the reason in `WWW-Authenticate`), not yet valid (`token not yet valid`: issued ahead of the clock beyond `TOKEN_LEEWAY_SECONDS`), revoked session (`session is revoked`)",
		example: "authorization token is required",
	},
	403: { name: "Forbidden", description: "Scope, grant, strict api-key, location or time check failed", example: "access denied" },
	404: { name: "NotFound", description: "No such document, or one the caller may not see", example: "document not found" },
	405: { name: "MethodNotAllowed", description: "The collection is written only by the platform", example: "touch/push-histories is written by the platform only" },
	409: {
		name: "Conflict",
		description:
			"`ref` already exists in the collection, a saga is not in flight (`saga <id> is not in flight`), a state change the saga or document does not allow, or `insufficient balance`, a wallet that holds money or takes part in a pending transaction (its delete or destroy), or a repeat while the request under its `Idempotency-Key` still runs (`a request with this idempotency key is in progress`: retry later)",
		example: "ref already exists",
	},
	412: {
		name: "PreconditionFailed",
		description: "`If-Match` names no current tag of the document (someone changed it since it was read): nothing changed",
		example: "precondition failed",
	},
	413: { name: "PayloadTooLarge", description: "Request body over its limit: 1 MiB of JSON (64 KiB of a token form)", example: "body must not be larger than 1 MiB" },
	415: {
		name: "UnsupportedMediaType",
		description: "The body is not of the type the operation takes: `application/json` (an upload: multipart/form-data). A body without any Content-Type answers 400",
		example: "this endpoint reads a JSON body: send Content-Type: application/json, not application/x-www-form-urlencoded",
	},
	416: { name: "RangeNotSatisfiable", description: "The range starts past the end of the content (`Content-Range: bytes */<size>`)", example: "range not satisfiable" },
	422: {
		name: "UnprocessableEntity",
		description: "The `Idempotency-Key` was used for another request (another method, path, query or body) within 24 hours",
		example: "idempotency key was used for another request",
	},
	429: {
		name: "TooManyRequests",
		description:
			"Over a limit: the request rate (`RATE_LIMIT`, per principal or IP: `too many requests`), failed logins of an account or through a client from one IP (at most 15 minutes), " +
			"TOTP checks of a session, open cursors of a principal (`too many open cursors`). Wait `Retry-After` seconds where it is sent",
		example: "too many requests",
		retryAfter: true,
	},
	502: { name: "BadGateway", description: "Query enforcement reached without the authentication or grant layer", example: "Bad Gateway" },
	503: {
		name: "ServiceUnavailable",
		description:
			"A service the request needs has no node, or its node went away during a call that may have written, or a store or cache it needs is away or slower than the request's deadline: retry after `Retry-After` seconds (a write with its `Idempotency-Key`)",
		example: "service unavailable",
		retryAfter: true,
	},
	504: {
		name: "GatewayTimeout",
		description: "A service did not answer in time: retry after `Retry-After` seconds (a write with its `Idempotency-Key`)",
		example: "request timed out",
		retryAfter: true,
	},
};

/** Statuses every operation that reaches a service can answer: the rate limit, a service or store away, a timeout. */
export const SERVICE_ERRORS = [429, 503, 504];

export function responsesComponent(): Record<string, Schema> {
	const out: Record<string, Schema> = {};
	for (const [code, r] of Object.entries(ERROR_RESPONSES)) {
		const statusCode = Number(code);
		out[r.name] = {
			description: r.description,
			...(r.retryAfter ? { headers: { "Retry-After": { description: "Seconds to wait before a retry", schema: { type: "integer", minimum: 0 } } } } : {}),
			content: { "application/json": { schema: ref("schemas", "Error"), example: { statusCode, message: r.example, error: STATUS_NAMES[statusCode] } } },
		};
	}
	return out;
}
