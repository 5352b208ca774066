"""Run by torch at `import torch` through the "torch.backends" entry point of
tutti's wheel (torch's plugin mechanism for out-of-tree backends;
TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns it off): the torch.distributed backend
"tutti" is known without `import tutti.torch`. Only the name is registered
here, with nothing of tutti loaded; tutti.torch and its libraries load when
the first tutti group is made."""


def register():
    import torch.distributed as dist

    if not dist.is_available() or "TUTTI" in dist.Backend._plugins:
        return

    def create(dist_opts, backend_options):
        import tutti.torch

        return tutti.torch._create(dist_opts, backend_options)

    dist.Backend.register_backend("tutti", create, extended_api=True, devices=["cpu"])
