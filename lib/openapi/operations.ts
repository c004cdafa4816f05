/** One route's operation: its kind's parts, its description, parameters, security, and every error it can answer. */
import type { RouteDef } from "../routes";
import { AUTH_OPS } from "./auth-ops";
import { collectionOp } from "./collection-ops";
import { ref, type Schema } from "./common";
import { genericOp } from "./op-parts";
import { ERROR_RESPONSES, PARAMETERS, SERVICE_ERRORS } from "./responses";
import { specialOp } from "./special-ops";

export function tagOf(r: RouteDef): string {
	return r.domain && r.collection ? `${r.domain.name}/${r.collection.name}` : r.path.split("/")[1];
}

export const KEYED_METHODS = new Set(["POST", "PATCH", "PUT", "DELETE"]);

export function operation(r: RouteDef): Schema {
	const parts =
		r.special && r.domain && r.collection ? specialOp(r) : r.op && r.domain && r.collection ? collectionOp(r, r.domain, r.collection) : (AUTH_OPS[r.action]?.() ?? genericOp(r));
	const description = [
		parts.description,
		r.public ? "Public: no token needed." : r.scope ? `Needs scope \`${r.scope}\` and a matching grant.` : "Needs a valid bearer token.",
		r.collection?.platformWritten && (r.op === "create" || r.op === "bulkCreate" || r.op === "patch" || r.op === "bulkPatch")
			? "This collection is written only by the platform: the request answers 405."
			: undefined,
	]
		.filter(Boolean)
		.join(" ");

	const pathParams = [...r.path.matchAll(/:([A-Za-z_]\w*)/g)].map((m) => m[1]);
	const names = [...(parts.parameters ?? [])];
	// A path parameter the operation does not name already (a future special route) still has to be declared.
	const extra = pathParams
		.filter((p) => !names.includes(p) && !parts.inlineParameters?.some((x) => x.name === p))
		.map((p) => ({ name: p, in: "path", required: true, schema: { type: "string" } }));
	if (!r.public) names.push("token", "xApiKey");
	// Authenticated writes take an Idempotency-Key (services/api/idempotency.ts), uploads included (fingerprinted by their parts).
	const keyed = !r.public && KEYED_METHODS.has(r.method);
	if (keyed) names.push("idempotencyKey");

	const responses: Record<string, Schema> = { ...parts.responses };
	// A JSON body sent as another type answers 415 (lib/body-media.ts).
	// Every route of the table is served through a service call behind the rate limit (services/api/rate-limit.ts).
	const errors = [
		...parts.errors,
		...((parts.requestBody?.content as Schema | undefined)?.["application/json"] ? [415] : []),
		...(keyed ? [400, 409, 422] : []),
		...SERVICE_ERRORS,
	];
	for (const code of [...new Set(errors)].sort((a, b) => a - b)) responses[String(code)] = parts.errorOverrides?.[code] ?? ref("responses", ERROR_RESPONSES[code].name);

	const op: Schema = {
		tags: [tagOf(r)],
		summary: r.summary,
		description,
		operationId: r.operationId ?? r.action.replace(/\./g, "_"),
	};
	const params = [...names.map((n) => ref("parameters", n)), ...(parts.inlineParameters ?? []), ...extra];
	if (params.length) op.parameters = params;
	if (parts.requestBody) op.requestBody = parts.requestBody;
	op.responses = responses;
	if (r.public) op.security = parts.security ?? [];
	return op;
}

/**
 * The query parameters the route's operation takes, by name: the ones this document describes, which the gateway
 * accepts (any other answers 400, services/api/route-table.ts).
 */
export function queryParameterNames(r: RouteDef): string[] {
	const params = (operation(r).parameters ?? []) as Schema[];
	const resolved = params.map((p) => (typeof p.$ref === "string" ? PARAMETERS[p.$ref.split("/").pop()!] : p));
	return [...new Set(resolved.filter((p) => p?.in === "query").map((p) => p.name as string))];
}
