export { type ClusterOptions, clusterSettings } from './cluster.js';
export {
  defaultWorkflowsPath,
  encodedFailureConverterPath,
  SideEffectPlugin,
  type SideEffectPluginOptions,
} from './plugin.js';
export { missingSearchAttributes } from './search-attributes.js';
