/** conjoint: the standard collection pattern on every collection of the domain (catalog/domains/conjoint.ts). */
import type { ServiceSchema } from "moleculer";
import { conjoint } from "../catalog/domains/conjoint";
import { collectionMixin } from "../mixins/collection.mixin";

const ConjointService: ServiceSchema = { name: "conjoint", mixins: [collectionMixin(conjoint)] };

export default ConjointService;
