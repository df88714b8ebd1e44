# Embedding lookup (nn.Embedding): gather rows of an fp32 [num_embeddings, embedding_dim] table by int64 indices.
import torch
import torch.nn as nn

num_embeddings = 32768
embedding_dim = 4096
batch_size = 64
seq_len = 4096


class Model(nn.Module):
    def __init__(self, num_embeddings: int, embedding_dim: int):
        super().__init__()
        self.embedding = nn.Embedding(num_embeddings, embedding_dim)

    def forward(self, indices: torch.Tensor) -> torch.Tensor:
        return self.embedding(indices)


def get_inputs():
    return [torch.randint(0, num_embeddings, (batch_size, seq_len))]


def get_init_inputs():
    return [num_embeddings, embedding_dim]
