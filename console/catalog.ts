/**
 * What the platform is made of, as its public OpenAPI document (`/api-json`) describes it: services, their
 * collections and fields, and each collection's special actions. Read once after sign-in; the console knows no
 * collection of its own.
 */

export interface FieldInfo {
	name: string;
	type: string;
	format?: string;
	enum?: string[];
	readOnly?: boolean;
	description?: string;
}

export interface SpecialInfo {
	method: string;
	/** The path after the collection's, `:id` for the document's id (`:id/abort`, `upload`). */
	path: string;
	byId: boolean;
	summary: string;
	operationId: string;
}

export interface CollectionInfo {
	service: string;
	name: string;
	description: string;
	fields: FieldInfo[];
	specials: SpecialInfo[];
}

export interface ServiceInfo {
	name: string;
	description: string;
	collections: CollectionInfo[];
}

export interface Catalog {
	services: ServiceInfo[];
	zones: string[];
	find(service: string, collection: string): CollectionInfo | undefined;
}

/** The eleven endpoints every collection has (docs/api.md): anything else under a collection is a special action. */
const STANDARD = new Set(["", "/count", "/cursor", "/bulk", "/{id}", "/{id}/restore", "/{id}/destroy"]);

type Op = { operationId?: string; summary?: string; tags?: string[]; responses?: Record<string, any> };
interface OpenApi {
	tags?: Array<{ name: string; description?: string }>;
	paths: Record<string, Record<string, Op>>;
	components: { schemas: Record<string, any>; parameters: Record<string, any> };
}

export function catalogOf(doc: OpenApi): Catalog {
	const described = new Map((doc.tags ?? []).map((t) => [t.name, t.description ?? ""]));
	const collections = new Map<string, CollectionInfo>();
	for (const [path, item] of Object.entries(doc.paths)) {
		const m = /^\/([a-z][a-z0-9-]*)\/([a-z][a-z0-9-]*)(\/.*)?$/.exec(path);
		if (!m) continue;
		const [, service, name, rest = ""] = m;
		const key = `${service}/${name}`;
		if (!described.has(key)) continue;
		let c = collections.get(key);
		if (!c) collections.set(key, (c = { service, name, description: described.get(key) ?? "", fields: [], specials: [] }));
		if (rest === "" && item.get) c.fields = fieldsOf(doc, item.get);
		if (STANDARD.has(rest)) continue;
		for (const [method, op] of Object.entries(item)) {
			if (!op || typeof op !== "object" || !op.operationId) continue;
			const sub = rest.slice(1).replace("{id}", ":id");
			c.specials.push({ method: method.toUpperCase(), path: sub, byId: sub.startsWith(":id"), summary: op.summary ?? "", operationId: op.operationId });
		}
	}
	const byService = new Map<string, ServiceInfo>();
	for (const c of collections.values()) {
		let s = byService.get(c.service);
		if (!s) byService.set(c.service, (s = { name: c.service, description: described.get(c.service) ?? "", collections: [] }));
		s.collections.push(c);
	}
	const zoneText = String(doc.components.parameters?.zone?.description ?? "");
	const zones = ["own", "share", "group", "client"].filter((z) => zoneText.includes(`\`${z}\``));
	const services = [...byService.values()];
	return { services, zones, find: (service, collection) => collections.get(`${service}/${collection}`) };
}

/** The fields of a list's items, from the schema its 200 answer names. */
function fieldsOf(doc: OpenApi, list: Op): FieldInfo[] {
	// An item is `<Name>`, or `anyOf` of `<Name>Full` (the same fields, all returned) and `<Name>`: the fields are `<Name>`'s.
	const item = list.responses?.["200"]?.content?.["application/json"]?.schema?.properties?.items?.items;
	const refs: string[] = item?.$ref ? [item.$ref] : (item?.anyOf ?? []).map((s: { $ref?: string }) => s.$ref).filter(Boolean);
	const ref = refs.find((r) => !r.endsWith("Full")) ?? refs[0];
	const schema = ref ? doc.components.schemas[ref.split("/").pop()!] : undefined;
	return Object.entries<any>(schema?.properties ?? {}).map(([name, p]) => ({
		name,
		type: String(p.type ?? (p.oneOf ? "any" : "object")),
		...(p.format ? { format: p.format } : {}),
		...(Array.isArray(p.enum) ? { enum: p.enum } : {}),
		...(p.readOnly ? { readOnly: true } : {}),
		...(p.description ? { description: p.description } : {}),
	}));
}

let loading: Promise<Catalog> | undefined;

/** The catalog, fetched once per page (the document is public and the same for every caller). */
export function loadCatalog(): Promise<Catalog> {
	loading ??= fetch("/api-json")
		.then((r) => {
			if (!r.ok) throw new Error(`/api-json answered ${r.status}`);
			return r.json();
		})
		.then(catalogOf);
	loading.catch(() => (loading = undefined));
	return loading;
}
