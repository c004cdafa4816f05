/**
 * The OpenAPI 3.1 description served at `/api-json`. It is generated from the route table the gateway mounts
 * (`allRoutes()`) and from the catalog, so the document cannot describe an endpoint or a field that the
 * platform does not have, nor miss one that it has.
 */
import { type CollectionDef, type DomainDef, DOMAINS } from "../../catalog";
import { STATUS_NAMES } from "../errors";
import { allRoutes } from "../routes";
import { json, ref, type Schema, schemaName } from "./common";
import { createSchema, docSchema, fullSchema, patchSchema, REVEALED_ON_CREATE } from "./fields";
import { operation, tagOf } from "./operations";
import { PARAMETERS, responsesComponent } from "./responses";
import { SPEC_SCHEMAS } from "./spec-schemas";

// Read at run time rather than imported so the version is always the one of the package actually deployed.
const pkg = require("../../package.json") as { version: string };

/** The gateway's own routes outside the catalog: health and metrics, public (issue 13: the document covers them). */
export const HEALTH_SCHEMA: Schema = {
	type: "object",
	required: ["status", "info"],
	properties: {
		status: { type: "string", enum: ["ok", "error"], description: "`ok` when every dependency, service and worker is up" },
		info: {
			type: "object",
			description: "One entry per dependency (`document store`, `relational store`, ...), per service (`service:<name>`) and worker",
			additionalProperties: {
				type: "object",
				required: ["status"],
				properties: {
					status: { type: "string", enum: ["up", "down"] },
					kind: { type: "string", description: "What serves it, where the deployment chooses (`document store`: `postgres`)" },
					message: { type: "string" },
				},
			},
		},
	},
};
export const OPS_PATHS: Record<string, Record<string, Schema>> = {
	"/status": {
		get: {
			tags: ["ops"],
			summary: "Health of the platform as this gateway sees it",
			operationId: "ops_status",
			security: [],
			responses: {
				"200": { description: "Everything is up", content: json(HEALTH_SCHEMA) },
				"503": { description: "Something is down: `info` says what", content: json(HEALTH_SCHEMA) },
			},
		},
	},
	"/metrics": {
		get: {
			tags: ["ops"],
			summary: "Prometheus metrics of this node (text exposition format 0.0.4)",
			description: "Public unless the deployment sets `METRICS_TOKEN`: then only `Authorization: Bearer <METRICS_TOKEN>` reads them (401 otherwise).",
			operationId: "ops_metrics",
			// Open by default; with METRICS_TOKEN, its bearer (runtime/ops-server.ts metricsAuthorized).
			security: [{}, { metricsToken: [] }],
			responses: {
				"200": { description: "Metrics", content: { "text/plain": { schema: { type: "string" } } } },
				"401": {
					description: "`METRICS_TOKEN` is set and the request does not carry it as its bearer (`WWW-Authenticate: Bearer`)",
					headers: { "WWW-Authenticate": { description: "`Bearer`", schema: { type: "string" } } },
					content: { "application/json": { schema: ref("schemas", "Error"), example: { statusCode: 401, message: "metrics token is required", error: STATUS_NAMES[401] } } },
				},
			},
		},
	},
	"/api-json": {
		get: {
			tags: ["ops"],
			summary: "This OpenAPI document: the whole API",
			operationId: "ops_api_json",
			security: [],
			responses: { "200": { description: "The OpenAPI 3.1 document of every service", content: json({ type: "object", description: "An OpenAPI 3.1 document" }) } },
		},
	},
	"/api-json/{service}": {
		get: {
			tags: ["ops"],
			summary: "The OpenAPI document of one service",
			description: "The paths under `/<service>` and the components they use; the interactive page (`/api`) loads these.",
			operationId: "ops_api_json_service",
			security: [],
			parameters: [{ name: "service", in: "path", required: true, description: "A service's name", schema: { type: "string", enum: DOMAINS.map((d) => d.name) } }],
			responses: {
				"200": { description: "The OpenAPI 3.1 document of the service", content: json({ type: "object", description: "An OpenAPI 3.1 document" }) },
				"404": {
					description: "No service of that name (the message lists them)",
					content: {
						"application/json": {
							schema: ref("schemas", "Error"),
							example: { statusCode: 404, message: "no API document for 'nope' (services: auth, ...; the whole API: /api-json)", error: STATUS_NAMES[404] },
						},
					},
				},
			},
		},
	},
};

export function build(): Schema {
	const routes = allRoutes();

	const collections = new Map<string, { d: DomainDef; c: CollectionDef }>();
	for (const r of routes) if (r.domain && r.collection) collections.set(`${r.domain.name}/${r.collection.name}`, { d: r.domain, c: r.collection });
	const refs = new Map([...collections].map(([path, { d, c }]) => [path, schemaName(d, c)]));

	const schemas: Record<string, Schema> = { ...SPEC_SCHEMAS };
	for (const [path, { d, c }] of collections) {
		const name = schemaName(d, c);
		schemas[name] = docSchema(d, c, refs);
		schemas[`${name}Full`] = fullSchema(d, c);
		schemas[`${name}Create`] = createSchema(d, c, refs);
		schemas[`${name}Patch`] = patchSchema(d, c, refs);
		const reveal = REVEALED_ON_CREATE[path];
		if (reveal) schemas[`${name}Created`] = { ...docSchema(d, c, refs, reveal), description: `The ${path} document as the create response returns it.` };
	}

	const paths: Record<string, Record<string, Schema>> = {};
	const tags: Array<{ name: string; description: string }> = [];
	for (const r of routes) {
		const path = r.path.replace(/:([A-Za-z_]\w*)/g, "{$1}");
		(paths[path] ??= {})[r.method.toLowerCase()] = operation(r);
		const tag = tagOf(r);
		if (!tags.some((t) => t.name === tag))
			tags.push({ name: tag, description: r.collection ? r.collection.description : "Tokens: issue, verify, logout, TOTP check, grant evaluation" });
	}
	Object.assign(paths, OPS_PATHS);
	tags.push({ name: "ops", description: "Health, metrics and this document (no token; metrics with `METRICS_TOKEN` when it is set)" });

	return {
		openapi: "3.1.0",
		info: {
			title: "Platform Gateway",
			version: pkg.version,
			description:
				"One uniform REST interface over the platform's domain services. Every collection offers the same 11 operations. " +
				"Send `Authorization: Bearer <token>` (a JWT from POST /auth/token, or a personal token `APT-...`). " +
				"Responses: `{ data }` for one document, `{ items, total }` for lists, `{ total }` for counts; errors are `{ statusCode, message, error }`.",
		},
		tags,
		paths,
		webhooks: {
			change: {
				post: {
					summary: "Change event delivered to a client's CQRS webhook (context/configs key `CQRS`)",
					operationId: "webhook_change",
					requestBody: { required: true, content: json(ref("schemas", "ChangeEvent")) },
					responses: { "200": { description: "Any 2xx acknowledges the event" } },
				},
			},
		},
		components: {
			schemas,
			parameters: PARAMETERS,
			responses: responsesComponent(),
			securitySchemes: {
				bearer: {
					type: "http",
					scheme: "bearer",
					bearerFormat: "JWT or APT",
					description: "A JWT (`eyJ...`) or a personal token (`APT-...`); alternatively the `token` query parameter or the `authorization` cookie.",
				},
				// The same bearer where a header cannot be set (EventSource, links, browsers).
				tokenQuery: { type: "apiKey", in: "query", name: "token", description: "The bearer token as `?token=<token>` (JWT or APT)" },
				tokenCookie: { type: "apiKey", in: "cookie", name: "authorization", description: "The bearer token in the `authorization` cookie (JWT or APT)" },
				// POST /auth/token only: `Authorization: Basic base64(client_id:client_secret)` (RFC 6749 §2.3.1).
				// GET /metrics when the deployment sets METRICS_TOKEN.
				metricsToken: { type: "http", scheme: "bearer", description: "`METRICS_TOKEN`, on GET /metrics when the deployment sets it" },
				clientBasic: {
					type: "http",
					scheme: "basic",
					description: "Client authentication on POST /auth/token: `client_id:client_secret` (each form-urlencoded), in place of `client_secret` in the body",
				},
			},
		},
		security: [{ bearer: [] }, { tokenQuery: [] }, { tokenCookie: [] }],
	};
}

export function deepFreeze<T>(v: T): T {
	if (v && typeof v === "object" && !Object.isFrozen(v)) {
		Object.freeze(v);
		for (const x of Object.values(v)) deepFreeze(x);
	}
	return v;
}

// Built once: the catalog and the route table are fixed for the life of the process. Frozen because every caller
// shares it.
let cached: Schema | undefined;

export function openApiDocument(opts: { serverUrl?: string } = {}): object {
	cached ??= deepFreeze(build());
	const { openapi, info, ...rest } = cached;
	return { openapi, info, servers: [{ url: opts.serverUrl ?? "/" }], ...rest };
}
