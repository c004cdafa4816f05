/**
 * `/mcp`: the Model Context Protocol's Streamable HTTP transport on the gateway's port (docs/mcp.md), served by the
 * official SDK's server core and transport, behind the gateway's own authentication, rate limit and body limit (the
 * `mcp` route of services/api.service.ts).
 *
 * - **Every tool call is a REST request.** lib/mcp-tools.ts turns the call into the request it stands for (action,
 *   `{ body, query, params }`); the call runs that action through the broker in a Context of its own whose meta is the
 *   one the REST route builds (token, token kind, caller IP, forwarded headers), so the authority middleware decides it
 *   (scope, grant, query enforcement, zones, fields) and the engine presents it as for REST. A refusal is the REST
 *   error, `{ statusCode, message, error }`, as an `isError` result. An `idempotency_key` is the request's
 *   Idempotency-Key, run by the gateway's own Idempotency (services/api/idempotency.ts): the same call keyed twice
 *   writes once, from MCP or REST alike.
 * - **Sessions are sealed, not stored.** An `initialize` answers `Mcp-Session-Id`: AES-256-GCM (a key derived from
 *   AES_SECRET for this purpose only) of the principal it was opened by (user, else API account, else client, and the
 *   client), the negotiated protocol version and the time it was opened. Every gateway of the deployment opens it, so a
 *   session opened on one node goes on on any other; a request whose token is another principal's is refused (403),
 *   one older than MCP_SESSION_TTL_MS or closed by DELETE answers 404 (the client initializes again). A closed session
 *   is remembered in the shared cache (Redis with REDIS_URL) until it would have expired.
 * - **Each request gets a fresh server and a stateless transport** (JSON answers, no stream): nothing of a session
 *   lives in a gateway's memory, which is what lets the next request land on another node.
 * - **Answers are bounded**: a page (at most 100 documents, as REST) and at most MAX_TOOL_ANSWER_BYTES of JSON; a page
 *   that would be larger is cut, and `next.skip` says where the rest starts.
 */
import { readFileSync } from "fs";
import path from "path";
import type { ServerResponse } from "http";
import type { Endpoint, LoggerInstance, ServiceBroker } from "moleculer";
import type { Server } from "@modelcontextprotocol/sdk/server/index.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { DOMAINS } from "../../catalog";
import { Aes, sha256Hex } from "../../lib/crypto";
import { ApiError, badRequest, toErrorBody } from "../../lib/errors";
import { collectionOps, MCP_TOOLS, TOOL_OPS, toolRequest, type ToolOp, type ToolRequest } from "../../lib/mcp-tools";
import { documentSchema, openApiDocument } from "../../lib/openapi";
import { hasParsedScope, parseScopes } from "../../lib/scopes";
import { principalOf, type TokenClaims } from "../../lib/types";
import type { KeyValue } from "../../runtime/kv";
import { observeHttp } from "../../runtime/metrics";
import { emitAudit } from "../../events/audit-shipper";
import { grantCache } from "../../authority/grant-cache";
import { lazy } from "../../lib/lazy";
import { subjectsOf } from "../../authority/authority";
import type { Idempotency, IdempotentRequest } from "./idempotency";
import type { GatewayContext, GatewayRequest } from "./web";

export const MCP_PATH = "/mcp";
/** The HKDF `info` of the session key. */
export const MCP_SESSIONS = "platform/mcp-sessions";
/** How long a session lasts from its `initialize`; then the client initializes again (404, as the protocol says). */
export const MCP_SESSION_TTL_MS = 24 * 3600 * 1000;
/** The most JSON one tool answer holds (its text repeats it): a page is cut to fit. */
export const MAX_TOOL_ANSWER_BYTES = 256 * 1024;
/**
 * The most JSON-RPC requests one HTTP request may carry (protocol 2025-06-18 has no batches; earlier ones do): with
 * MAX_TOOL_ANSWER_BYTES, what one request of 1 MB can make the gateway hold and send stays a few MB.
 */
export const MAX_BATCH_REQUESTS = 10;
const SESSION_HEADER = "mcp-session-id";
const VERSION_HEADER = "mcp-protocol-version";
/** Request headers a tool call's meta keeps from the HTTP request (the others are the tool's own arguments). */
const KEPT_HEADERS = ["user-agent"];

const pkg = require("../../package.json") as { version: string };

/** The MCP SDK (with zod and ajv, the largest modules a node would load), loaded by the first request to /mcp. */
const sdk = lazy(() => ({
	...(require("@modelcontextprotocol/sdk/server/index.js") as typeof import("@modelcontextprotocol/sdk/server/index.js")),
	...(require("@modelcontextprotocol/sdk/server/streamableHttp.js") as typeof import("@modelcontextprotocol/sdk/server/streamableHttp.js")),
	...(require("@modelcontextprotocol/sdk/types.js") as typeof import("@modelcontextprotocol/sdk/types.js")),
}));

const INSTRUCTIONS =
	"The platform's collections through its authority layer. Call `collections` first: it lists the collections this token may use, " +
	"the operations its scope and grants allow, and a JSON schema of the fields it may read. Each tool call is decided as the REST " +
	"request it stands for (the same scope, grants, zones and fields; the same errors, as isError results with { statusCode, message, error }). " +
	"find and search answer one page (`pagination.limit` at most 100); `next.skip` says where the next page starts. " +
	"Resources: the OpenAPI document and the pages api, security and mcp.";

type Req = GatewayRequest;
type Token = TokenClaims;

/** The gateway's parts the endpoint uses (the api service). */
export interface McpHost {
	broker: ServiceBroker;
	logger: LoggerInstance;
	kv: KeyValue;
	idempotency: Idempotency;
	/** moleculer-web's `api.rest` endpoint: a tool call's Context is created on it, as the lean path's are. */
	restEndpoint: Endpoint;
	/** RATE_LIMIT's bucket for `who` (429 when empty). */
	limitRate(res: ServerResponse, who: string): Promise<void>;
}

/** Whom a session belongs to: the principal (lib/types.ts) in its client. */
function sessionOwner(t: Token | undefined): string | undefined {
	const who = principalOf(t);
	return who && `${who}@${t!.cid}`;
}

interface SessionClaims {
	/** sessionOwner of the token that opened it. */
	p: string;
	/** The negotiated protocol version. */
	v: string;
	/** Opened at (ms). */
	t: number;
}

/** Sealed session ids (see the top of this file). */
export class McpSessions {
	private readonly aes: Aes;

	constructor(
		aesSecret: string,
		private readonly kv: KeyValue,
		private readonly now: () => number = Date.now,
	) {
		this.aes = Aes.forPurpose(aesSecret, MCP_SESSIONS);
	}

	open(principal: string, version: string): string {
		return this.aes.encrypt(JSON.stringify({ p: principal, v: version, t: this.now() } satisfies SessionClaims));
	}

	/** The session `id` names, for `principal`: 404 when it is none (or expired, or closed), 403 when another principal's. */
	async check(id: string, principal: string): Promise<SessionClaims> {
		const claims = this.claims(id);
		if (!claims) throw new ApiError(404, "MCP session not found: initialize a new one");
		if (claims.p !== principal) throw new ApiError(403, "this MCP session belongs to another principal: initialize a session with this token");
		if ((await this.kv.get(closedKey(id))) !== null) throw new ApiError(404, "MCP session not found: initialize a new one");
		return claims;
	}

	/** Closes the session (DELETE /mcp) on every gateway: remembered until it would have expired anyway. */
	async close(id: string, claims: SessionClaims): Promise<void> {
		const left = claims.t + MCP_SESSION_TTL_MS - this.now();
		if (left > 0) await this.kv.set(closedKey(id), "1", left);
	}

	private claims(id: string): SessionClaims | undefined {
		const text = id.length <= 1024 ? this.aes.decrypt(id) : null;
		if (text === null) return undefined;
		let c: Partial<SessionClaims>;
		try {
			c = JSON.parse(text);
		} catch {
			return undefined;
		}
		if (typeof c.p !== "string" || typeof c.v !== "string" || typeof c.t !== "number") return undefined;
		const age = this.now() - c.t;
		return age >= 0 && age < MCP_SESSION_TTL_MS ? (c as SessionClaims) : undefined;
	}
}

const closedKey = (id: string) => `mcp:closed:${sha256Hex(id)}`;

/** A JSON-RPC message's method, if it is a request or notification. */
const methodOf = (m: unknown) => (m && typeof m === "object" ? (m as { method?: unknown }).method : undefined);
/** JSON-RPC requests (not notifications or responses) of a body. */
const requestsIn = (messages: unknown[]) => messages.filter((m) => typeof methodOf(m) === "string" && (m as { id?: unknown }).id !== undefined).length;

// ---------------------------------------------------------------------------------------------------------------
// Resources: the OpenAPI document and the pages an agent needs

interface Page {
	uri: string;
	name: string;
	title: string;
	description: string;
	mimeType: string;
	text: () => string;
}

/** docs/ beside the sources (`services/api/` → `../../docs`), or beside the compiled code (`dist/services/api/` → `../../../docs`). */
function docsFile(name: string): string | undefined {
	for (const up of ["../..", "../../.."]) {
		const file = path.resolve(__dirname, up, "docs", name);
		try {
			return readFileSync(file, "utf8");
		} catch {
			/* the next place */
		}
	}
	return undefined;
}

const pageTexts = new Map<string, string | undefined>();
function docsPage(name: string): string | undefined {
	if (!pageTexts.has(name)) pageTexts.set(name, docsFile(name));
	return pageTexts.get(name);
}

const PAGES: Page[] = [
	{
		uri: "platform://openapi.json",
		name: "openapi",
		title: "OpenAPI document",
		description: "Every REST endpoint, parameter and field of the platform (also served at /api-json)",
		mimeType: "application/json",
		text: () => JSON.stringify(openApiDocument()),
	},
	...[
		["api", "The API: requests, scopes, grants, errors, limits"],
		["security", "The security model: tenants, the layers of a request, delivery paths, secrets"],
		["mcp", "This endpoint: connecting, the tools, what an APT's scopes allow"],
	].map(([name, description]) => ({
		uri: `platform://docs/${name}.md`,
		name,
		title: `docs/${name}.md`,
		description,
		mimeType: "text/markdown",
		text: () => docsPage(`${name}.md`) ?? "",
	})),
];
/** The pages present where the gateway runs (an image without docs/ offers the OpenAPI document only). */
const pagesHere = () => PAGES.filter((p) => p.mimeType === "application/json" || docsPage(`${p.name}.md`) !== undefined);

// ---------------------------------------------------------------------------------------------------------------

/** What a replayed Idempotency-Key answer writes (services/api/idempotency.ts writes it to a response). */
class Captured {
	statusCode = 200;
	headersSent = false;
	writableEnded = false;
	body = "";
	writeHead(status: number) {
		this.statusCode = status;
		this.headersSent = true;
		return this;
	}
	setHeader() {
		return this;
	}
	end(chunk?: string | Buffer) {
		if (chunk !== undefined) this.body += chunk.toString();
		this.writableEnded = true;
		return this;
	}
}

/** A tool's answer: its JSON as structured content and as text. */
const answer = (data: Record<string, unknown>): CallToolResult => ({ structuredContent: data, content: [{ type: "text", text: JSON.stringify(data) }] });
const size = (v: unknown) => Buffer.byteLength(JSON.stringify(v));
const tooLarge = (what: string) => new ApiError(413, `${what} is larger than the ${MAX_TOOL_ANSWER_BYTES / 1024} KiB a tool answer holds`);

export class McpEndpoint {
	readonly sessions: McpSessions;

	constructor(
		private readonly host: McpHost,
		aesSecret: string,
	) {
		this.sessions = new McpSessions(aesSecret, host.kv);
	}

	/** The `mcp` route's handler: the request is authenticated and counted already. Refusals are thrown (ApiError). */
	async handle(req: Req, res: ServerResponse): Promise<void> {
		const token = req.$ctx.meta.token as Token;
		const principal = sessionOwner(token);
		if (!principal) throw new ApiError(401, "authorization token is required");
		const who = principalOf(token)!;
		const sessionId = typeof req.headers[SESSION_HEADER] === "string" ? (req.headers[SESSION_HEADER] as string) : undefined;
		if (req.method === "GET") {
			res.setHeader("Allow", "POST, DELETE");
			throw new ApiError(405, "GET /mcp opens no stream: this server sends no message of its own; send requests with POST");
		}
		if (req.method === "DELETE") {
			if (sessionId === undefined) throw badRequest("Mcp-Session-Id is required");
			await this.sessions.close(sessionId, await this.sessions.check(sessionId, principal));
			res.writeHead(204);
			res.end();
			observeHttp(this.host.broker, req, 204);
			return;
		}
		const body = req.$params?.body;
		const messages: unknown[] = Array.isArray(body) ? body : [body];
		const init = messages.find((m) => methodOf(m) === "initialize") as { params?: { protocolVersion?: unknown } } | undefined;
		if (init) {
			const asked = init.params?.protocolVersion;
			const version = typeof asked === "string" && sdk().SUPPORTED_PROTOCOL_VERSIONS.includes(asked) ? asked : sdk().LATEST_PROTOCOL_VERSION;
			res.setHeader(SESSION_HEADER, this.sessions.open(principal, version));
		} else {
			if (sessionId === undefined) throw badRequest("Mcp-Session-Id is required: send initialize first, then its Mcp-Session-Id with every request");
			const session = await this.sessions.check(sessionId, principal);
			const version = req.headers[VERSION_HEADER];
			if (typeof version === "string" && version !== session.v) throw badRequest(`MCP-Protocol-Version ${version.slice(0, 32)} is not this session's (${session.v})`);
		}
		const requests = requestsIn(messages);
		if (requests > MAX_BATCH_REQUESTS) throw badRequest(`a batch holds at most ${MAX_BATCH_REQUESTS} requests, not ${requests}`);
		// RATE_LIMIT: one request was counted by the authentication; each further request of a batch counts too.
		for (let extra = requests - 1; extra > 0; extra--) await this.host.limitRate(res, who);
		const server = this.server(req);
		const transport = new (sdk().StreamableHTTPServerTransport)({ sessionIdGenerator: undefined, enableJsonResponse: true });
		try {
			await server.connect(transport);
			await transport.handleRequest(req, res, body);
		} finally {
			observeHttp(this.host.broker, req, res.statusCode);
			await server.close().catch(() => undefined);
		}
	}

	/** A server for one request: the tools and resources, every call made as `req`'s caller. */
	private server(req: Req): Server {
		const { Server, ListToolsRequestSchema, CallToolRequestSchema, ListResourcesRequestSchema, ReadResourceRequestSchema, McpError, ErrorCode } = sdk();
		const server = new Server(
			{ name: "platform-gateway", title: "Platform gateway", version: pkg.version },
			{ capabilities: { tools: { listChanged: false }, resources: { listChanged: false } }, instructions: INSTRUCTIONS },
		);
		server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: MCP_TOOLS.map((t) => ({ ...t })) }));
		server.setRequestHandler(CallToolRequestSchema, async (r) => this.call(req, r.params.name, r.params.arguments));
		server.setRequestHandler(ListResourcesRequestSchema, async () => ({
			resources: pagesHere().map(({ uri, name, title, description, mimeType }) => ({ uri, name, title, description, mimeType })),
		}));
		server.setRequestHandler(ReadResourceRequestSchema, async (r) => {
			const page = pagesHere().find((p) => p.uri === r.params.uri);
			if (!page)
				throw new McpError(
					ErrorCode.InvalidParams,
					`no resource ${String(r.params.uri).slice(0, 100)}; resources: ${pagesHere()
						.map((p) => p.uri)
						.join(", ")}`,
				);
			return { contents: [{ uri: page.uri, mimeType: page.mimeType, text: page.text() }] };
		});
		return server;
	}

	/** One tool call: its answer, or its refusal as an `isError` result. */
	private async call(req: Req, tool: string, args: unknown): Promise<CallToolResult> {
		try {
			const tr = toolRequest(tool, args);
			if (tr.tool === "collections") return answer(this.bounded(tr, await this.collections(req, tr)));
			return answer(this.bounded(tr, await this.run(req, tr)));
		} catch (err) {
			const body = toErrorBody(err);
			if (body.statusCode >= 500) this.host.logger.error("MCP tool call failed", tool, err);
			return { isError: true, content: [{ type: "text", text: JSON.stringify(body) }] };
		}
	}

	/**
	 * Runs the request through the broker as the REST route would: a Context of its own (the request's id; meta: the
	 * caller's token, token kind and IP), the route's parameters, the request's Idempotency-Key. Audited as that request.
	 */
	private async run(req: Req, tr: ToolRequest): Promise<Record<string, unknown>> {
		const { broker, idempotency } = this.host;
		const meta = req.$ctx.meta;
		const headers: Record<string, string> = { ...tr.headers };
		for (const h of KEPT_HEADERS) if (typeof req.headers[h] === "string") headers[h] = req.headers[h] as string;
		const ctx = broker.ContextFactory.create(
			broker,
			this.host.restEndpoint,
			{},
			{ requestID: req.$ctx.requestID, meta: { token: meta.token, tokenKind: meta.tokenKind, ip: meta.ip, headers } },
		) as GatewayContext;
		// The request the call stands for, as the gateway's Idempotency and audit read a request.
		const as = {
			method: tr.method,
			url: tr.path,
			originalUrl: tr.path,
			headers: tr.idempotencyKey === undefined ? {} : { "idempotency-key": tr.idempotencyKey },
			$ctx: ctx,
			$params: tr.params,
			$alias: { action: tr.action, path: MCP_PATH },
			$startedAt: process.hrtime.bigint(),
			$viaMcp: true,
		} as unknown as IdempotentRequest;
		const captured = new Captured();
		try {
			const data = await idempotency.around(as, captured as unknown as ServerResponse, tr.action, async () => {
				const out = await ctx.call(tr.action, tr.params);
				if (as.$idempotency) await idempotency.answered(as, (ctx.meta.$statusCode as number | undefined) ?? 200, out);
				return out;
			});
			if (as.$replayed) {
				// Replayed by the gateway's Idempotency, which audited it.
				const kept = JSON.parse(captured.body) as Record<string, unknown>;
				if (captured.statusCode >= 400) throw new ApiError(captured.statusCode, typeof kept.message === "string" ? kept.message : "request failed");
				return kept;
			}
			emitAudit(broker, as, (ctx.meta.$statusCode as number | undefined) ?? 200, data);
			return (data ?? {}) as Record<string, unknown>;
		} catch (err) {
			if (!as.$replayed) emitAudit(broker, as, toErrorBody(err).statusCode);
			throw err;
		}
	}

	/**
	 * The collections the caller may use: each collection's operations whose scope the token holds and whose grant a
	 * subject of the token holds (the authority layer's own checks), and the schema of the fields its read grant shows
	 * (its write grant's when it may not read).
	 */
	private async collections(req: Req, tr: ToolRequest): Promise<Record<string, unknown>> {
		const token = req.$ctx.meta.token as Token;
		if (token.type !== "access") throw new ApiError(401, "authorization token is required");
		const index = grantCache.loaded() ?? (await grantCache.get(req.$ctx));
		const scopes = parseScopes(token.scope ?? "");
		const subjects = subjectsOf(token);
		const service = tr.params.query.service;
		const out: Array<Record<string, unknown>> = [];
		for (const d of DOMAINS) {
			if (service !== undefined && d.name !== service) continue;
			for (const c of d.collections) {
				const decisions = new Map<string, string[] | null | false>();
				const decide = (action: string) => {
					if (!decisions.has(action)) {
						const ok = hasParsedScope(scopes, `${action}:${d.name}:${c.name}`);
						const dec = ok ? index.decide({ subjects, action, object: `${d.name}:${c.name}`, ip: req.$ctx.meta.ip, tz: token.tz, token }) : undefined;
						decisions.set(action, dec?.granted ? dec.fields : false);
					}
					return decisions.get(action)!;
				};
				const ops = collectionOps(c).filter((op: ToolOp) => decide(TOOL_OPS[op]) !== false);
				if (!ops.length) continue;
				const read = decide("read");
				const fields = read !== false ? read : (decide(TOOL_OPS[ops[0]]) as string[] | null);
				out.push({ collection: `${d.name}/${c.name}`, description: c.description, operations: ops, schema: documentSchema(d, c, fields) });
			}
		}
		return { collections: out };
	}

	/**
	 * The answer within MAX_TOOL_ANSWER_BYTES: a page cut to fit (with `next`), a write's answer reduced to the id it
	 * wrote (the write is done), anything else too large refused (413, with what to ask instead).
	 */
	private bounded(tr: ToolRequest, data: Record<string, unknown>): Record<string, unknown> {
		if (tr.tool === "find" || tr.tool === "search") {
			const items = Array.isArray(data.items) ? (data.items as unknown[]) : [];
			const total = typeof data.total === "number" ? data.total : items.length;
			const skip = tr.skip ?? 0;
			const page = (n: number) => ({ ...data, items: items.slice(0, n), total, ...(skip + n < total ? { next: { skip: skip + n } } : {}) });
			let n = items.length;
			let out = page(n);
			while (n > 0 && size(out) > MAX_TOOL_ANSWER_BYTES) out = page((n = Math.floor(n / 2)));
			if (n === 0 && items.length > 0) throw tooLarge("one document of this page: ask fewer fields with projection");
			return out;
		}
		if (size(data) <= MAX_TOOL_ANSWER_BYTES) return data;
		if (tr.tool === "create" || tr.tool === "update" || tr.tool === "delete" || tr.tool === "restore") {
			const id = (data.data as { id?: unknown } | undefined)?.id;
			return { data: { id } };
		}
		if (tr.tool === "collections") throw tooLarge("the list of every collection: name a service");
		throw tooLarge(tr.tool === "get" ? "this document: ask fewer fields with projection" : "this answer");
	}
}
