"""Training and sampling through a Tinker service (``model.tinker.enable``).

The service holds the weights; trivium keeps everything else: workflows, rewards, the
buffer, advantages and the loss, which runs on this machine over the logprobs the
service returns (the SDK's custom-loss path). The package:

* ``connection``: the SDK's ``ServiceClient`` from the environment, and every service call
  bounded in time with its failures turned into messages that say what to do;
* ``datums``: experiences as the service's ``Datum``s, and its logprobs back on trivium's
  response grid;
* ``engine``: the ``tinker`` rollout engine, sampling through the service's sampling client;
* ``engine_factory``: the ``tinker`` engine type, registered in trivium's engine registry;
* ``trainer``: the trainer that sends forward/backward and optimizer steps to the service,
  publishes weights for the sampler and keeps its checkpoints' service paths.
"""
