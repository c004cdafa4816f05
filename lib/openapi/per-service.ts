/**
 * One OpenAPI document per service (`/api-json/<service>`), cut from the full one (`/api-json`, ~1 MB): the paths
 * under `/<service>`, their tags, and only the components they reference (transitively). The docs page (/api) loads
 * one of these, so it is usable at once; the full document stays the reference for tools.
 */
import { DOMAINS } from "../../catalog";
import { openApiDocument } from "./document";

type Json = Record<string, unknown>;

/** What this reads of the full document (lib/openapi/document.ts builds it). */
interface FullDocument {
	openapi: string;
	info: { title: string; description?: string; [field: string]: unknown };
	servers?: unknown;
	security?: unknown;
	tags: Array<{ name: string }>;
	paths: Json;
	components: Record<string, Json | undefined>;
}

export const DOC_SERVICES: readonly string[] = DOMAINS.map((d) => d.name);

function refsIn(v: unknown, out: Set<string>): void {
	if (!v || typeof v !== "object") return;
	if (Array.isArray(v)) {
		for (const x of v) refsIn(x, out);
		return;
	}
	for (const [k, x] of Object.entries(v as Json)) {
		if (k === "$ref" && typeof x === "string") out.add(x);
		else refsIn(x, out);
	}
}

const cache = new Map<string, object>();

/** The document of one service, or null for a name that is not one. */
export function openApiServiceDocument(service: string): object | null {
	if (!DOC_SERVICES.includes(service)) return null;
	const hit = cache.get(service);
	if (hit) return hit;
	const full = openApiDocument() as FullDocument;
	const paths: Json = {};
	for (const [p, item] of Object.entries(full.paths)) if (p === `/${service}` || p.startsWith(`/${service}/`)) paths[p] = item;
	// Components referenced by the paths and the security requirements, then by those components, until stable.
	const components: Record<string, Json | undefined> = { securitySchemes: full.components.securitySchemes };
	const seen = new Set<string>();
	const queue = new Set<string>();
	refsIn(paths, queue);
	while (queue.size) {
		const ref = queue.values().next().value as string;
		queue.delete(ref);
		if (seen.has(ref)) continue;
		seen.add(ref);
		const m = /^#\/components\/([^/]+)\/(.+)$/.exec(ref);
		if (!m) continue;
		const target = full.components[m[1]]?.[m[2]];
		if (target === undefined) continue;
		(components[m[1]] ??= {})[m[2]] = target;
		const more = new Set<string>();
		refsIn(target, more);
		for (const r of more) if (!seen.has(r)) queue.add(r);
	}
	const tags = full.tags.filter((t) => t.name === service || t.name.startsWith(`${service}/`));
	const doc = {
		openapi: full.openapi,
		info: {
			...full.info,
			title: `${full.info.title}: ${service}`,
			description: `${full.info.description ?? ""}\n\nThis document covers the \`${service}\` service; the whole API is at /api-json.`,
		},
		servers: full.servers,
		tags,
		paths,
		components,
		security: full.security,
	};
	cache.set(service, doc);
	return doc;
}
