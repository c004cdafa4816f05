/**
 * The query parameters each route takes are the ones its OpenAPI operation describes (lib/openapi/operations.ts
 * queryParameterNames): any other answers 400 naming it and the accepted ones. A parameter the gateway ignored
 * (`?limit=20`, `?sort=`) gave the default page without a word.
 */
import { badRequest } from "../../lib/errors";
import { queryParameterNames } from "../../lib/openapi";
import { allRoutes } from "../../lib/routes";

/** Longest name echoed in the message: the rest of an absurd one says nothing more. */
const NAME_SHOWN = 64;

let accepted: Map<string, readonly string[]> | undefined;

/** The accepted names by `<METHOD> <path>` of the route table (built once, on first use). */
function acceptedOf(method: string, path: string): readonly string[] | undefined {
	accepted ??= new Map(allRoutes().map((r) => [`${r.method} ${r.path}`, queryParameterNames(r)]));
	return accepted.get(`${method} ${path}`);
}

/**
 * 400 `unknown query parameter <name>; accepted: <names>` when the request's query names a parameter its route does
 * not take. A route outside the table (the gateway's own pages) is not checked.
 */
export function refuseUnknownQuery(query: Record<string, unknown> | undefined, alias: { method?: string; fullPath?: string } | undefined): void {
	const names = Object.keys(query ?? {});
	if (!names.length || !alias?.method || !alias.fullPath) return;
	const ok = acceptedOf(alias.method, alias.fullPath);
	if (!ok) return;
	const unknown = names.filter((n) => !ok.includes(n));
	if (!unknown.length) return;
	const shown = unknown.map((n) => (n.length > NAME_SHOWN ? `${n.slice(0, NAME_SHOWN)}...` : n)).join(", ");
	throw badRequest(`unknown query parameter${unknown.length > 1 ? "s" : ""} ${shown}; ${ok.length ? `accepted: ${ok.join(", ")}` : "this endpoint takes none"}`);
}
