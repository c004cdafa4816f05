/** special: the standard collection pattern on every collection of the domain (catalog/domains/special.ts). */
import type { ServiceSchema } from "moleculer";
import { special } from "../catalog/domains/special";
import { collectionMixin } from "../mixins/collection.mixin";

const SpecialService: ServiceSchema = { name: "special", mixins: [collectionMixin(special)] };

export default SpecialService;
