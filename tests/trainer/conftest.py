import torch

from trivium.core.experience import Experience


def make_experiences(num_groups=2, group_size=4, prompt_len=5, seed=0, vocab=50):
    """Random token sequences of varied lengths with rewards and group ids."""
    generator = torch.Generator().manual_seed(seed)
    experiences = []
    for g in range(num_groups):
        for i in range(group_size):
            p = prompt_len + (i % 2)
            r = 3 + (i + g) % 4
            tokens = torch.randint(5, vocab, (p + r,), generator=generator)
            experiences.append(
                Experience(
                    tokens=tokens,
                    prompt_length=p,
                    logprobs=torch.zeros(r),
                    reward=float((i + g) % 2),
                    group_id=f"g{g}",
                    advantages=torch.full((r,), 1.0 if (i + g) % 2 else -1.0),
                )
            )
    return experiences
