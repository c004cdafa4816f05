/** The catalog: the one source of truth from which services, routes, validation, OpenAPI and scopes derive. */
import type { CollectionDef, DomainDef } from "./types";
import { auth } from "./domains/auth";
import { domain } from "./domains/domain";
import { context } from "./domains/context";
import { essential } from "./domains/essential";
import { financial } from "./domains/financial";
import { general } from "./domains/general";
import { identity } from "./domains/identity";
import { special } from "./domains/special";
import { touch } from "./domains/touch";
import { content } from "./domains/content";
import { logistic } from "./domains/logistic";
import { conjoint } from "./domains/conjoint";
import { career } from "./domains/career";
import { thing } from "./domains/thing";
import { PLATFORM_FIELDS, SETTABLE_FIELDS } from "./common";
import { documentFields } from "./field-docs";

export * from "./types";
export { PLATFORM_FIELDS, SETTABLE_FIELDS, DEFAULT_VERSION } from "./common";

export const DOMAINS: readonly DomainDef[] = [auth, domain, context, essential, financial, general, identity, special, touch, content, logistic, conjoint, career, thing];

export interface CollectionRef {
	domain: DomainDef;
	collection: CollectionDef;
	/** `service/collection`, e.g. `identity/users`. */
	path: string;
}

export const COLLECTIONS: readonly CollectionRef[] = DOMAINS.flatMap((d) => d.collections.map((c) => ({ domain: d, collection: c, path: `${d.name}/${c.name}` })));

const byPath = new Map(COLLECTIONS.map((c) => [c.path, c]));

export function findCollection(service: string, collection: string): CollectionRef | undefined {
	return byPath.get(`${service}/${collection}`);
}

export function findDomain(name: string): DomainDef | undefined {
	return DOMAINS.find((d) => d.name === name);
}

// A saga stage may target any collection of the catalog: its enum is the catalog itself, filled here so it is never
// written twice.
(essential.collections.find((c) => c.name === "saga-stages")!.fields.bucket as { enum?: readonly string[] }).enum = COLLECTIONS.map((c) => c.path);

// What each field means, with an example (catalog/field-docs.ts): read by the OpenAPI document.
documentFields(DOMAINS, [PLATFORM_FIELDS, SETTABLE_FIELDS]);
